//! The event log's contract: one [`Line`] per line of `--events`, its
//! [`Event`] one variant per kind, typed. The writer ([`super::Events`])
//! serialises these, the readers (`netchaos records`, drills, the report)
//! deserialise them, and `netchaos schema` prints their JSON Schema
//! (docs/events.schema.json, kept current by a test) — one definition, so
//! what users are told and what is written cannot drift apart.
//!
//! Versioning: every line carries `v` ([`VERSION`]). A field or event
//! added keeps the version (readers skip what they do not know); a field
//! renamed, removed or given another meaning raises it. Lines written
//! before versions (no `v`) read as version 0, the same shape.
//!
//! Strings borrow where they can ([`Cow`]): the writer builds a line from
//! what the connection already holds, without copying it.

use std::borrow::Cow;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The schema version lines are written with.
pub(crate) const VERSION: u32 = 1;

type Str<'a> = Cow<'a, str>;

/// One line of the event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "netchaos event log line",
    extend("unevaluatedProperties" = false)
)]
pub(crate) struct Line<'a> {
    /// The schema version the line was written with (absent before
    /// version 1: read as 0, the same shape).
    #[serde(default)]
    pub v: u32,
    /// Wall-clock time, RFC 3339 with milliseconds, UTC. (Readers take
    /// a line without it, as "": hand-made logs.)
    #[serde(default, borrow)]
    pub time: Str<'a>,
    /// Seconds since netchaos started (to the microsecond): the clock the
    /// other times of a run are on. (Readers take a line without it as 0.)
    #[serde(default)]
    pub t: f64,
    #[serde(flatten, borrow)]
    pub event: Event<'a>,
}

/// What happened, by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    /// The run began.
    Start(#[serde(borrow)] Start<'a>),
    /// What the run was asked to do, once after `start`.
    Plan(#[serde(borrow)] Plan<'a>),
    /// A connection was accepted (or its SYN held, under interception).
    Open(#[serde(borrow)] Conn<'a>),
    /// A connection ended.
    Close(#[serde(borrow)] Close<'a>),
    /// A fault took effect: once per connection and direction when it
    /// first acts (a stall that never triggers is not counted); HTTP
    /// faults once per request, DNS faults once per query.
    Fault(#[serde(borrow)] Fault<'a>),
    /// How a DNS query of the namespace ended.
    Dns(#[serde(borrow)] DnsAnswered<'a>),
    /// The upstream answered an HTTP request (its own answer, not
    /// netchaos's): one line per response head.
    Response(#[serde(borrow)] OnRequest<'a>),
    /// A gRPC call's trailers from the upstream ended it (OK or not).
    Trailers(#[serde(borrow)] OnRequest<'a>),
    /// An HTTP/2 upstream reset a stream before its answer's end; the
    /// client's stream is reset with the same code.
    StreamReset(#[serde(borrow)] StreamReset<'a>),
    /// Something went wrong in the relay itself (not an injected fault).
    Error(#[serde(borrow)] RelayError<'a>),
    /// A client refused the run's certificate (under `--tls`).
    TlsRefused(#[serde(borrow)] TlsRefused<'a>),
    /// An HTTP/2 upstream sent its connection away and was dialled again;
    /// the client's connection stays.
    Redial(#[serde(borrow)] Redial<'a>),
    /// An HTTP/2 upstream sent its connection away and was not dialled
    /// again: the client's connection is sent away in turn.
    Goaway(#[serde(borrow)] Goaway<'a>),
    /// A listener stopped accepting for a while.
    Paused(#[serde(borrow)] Paused<'a>),
    /// The SYN gate refused a connection.
    Refused(#[serde(borrow)] Refused<'a>),
    /// One HTTP attempt (`--records`, drills): the request and what the
    /// client got.
    Attempt(#[serde(borrow)] Attempt<'a>),
    /// `--stop-if` crossed: the faults were removed.
    StopIf(#[serde(borrow)] StopIf<'a>),
    /// The faults stop `at_ms` after the start (`--duration`).
    FaultsEnd(FaultsEnd),
    /// The log reached `--events-max`: later events are counted, not
    /// written. Always the last line.
    Truncated(Truncated),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Start<'a> {
    /// The run's seed (`--seed` replays it). A JSON number over 2^53:
    /// readers that parse numbers as doubles (jq, JavaScript, pandas) lose
    /// its last digits — read `seed_str`.
    pub seed: u64,
    /// The seed as a decimal string, exact in every reader. (Logs of
    /// netchaos 0.1 before it was added read as "".)
    #[serde(default, borrow)]
    pub seed_str: Str<'a>,
    /// netchaos's version.
    #[serde(borrow)]
    pub version: Str<'a>,
    /// The command: `run`, `proxy`, `server`, `attach`, `demo`, …
    #[serde(borrow)]
    pub mode: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Plan<'a> {
    /// netchaos's own command line (the API token hidden).
    #[serde(borrow)]
    pub argv: Vec<Str<'a>>,
    #[serde(borrow)]
    pub profiles: Vec<ProfileUsed<'a>>,
    #[serde(borrow)]
    pub rules: Vec<RulePlan<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct ProfileUsed<'a> {
    /// Where it came from: a built-in's name or a file's path.
    #[serde(borrow)]
    pub source: Str<'a>,
    #[serde(borrow)]
    pub description: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct RulePlan<'a> {
    #[serde(borrow)]
    pub name: Str<'a>,
    #[serde(borrow)]
    pub faults: Vec<FaultPlan<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct FaultPlan<'a> {
    /// The fault's kind (`netchaos faults` lists them).
    #[serde(borrow)]
    pub fault: Str<'a>,
    /// Every parameter, defaults included.
    #[serde(borrow)]
    pub params: Params<'a>,
    /// Its window (`active`), in milliseconds after the start.
    pub active_from_ms: Option<u64>,
    pub active_until_ms: Option<u64>,
}

/// A fault's parameters as its `--fault` flag writes them, in that
/// flag's words and units (`"delay": "150ms"`); a named one as
/// `key.name` (`"set_header.Retry-After": "5"`). `--fault KIND:k=v,…`
/// with these gives the same fault back.
pub(crate) type Params<'a> = IndexMap<Str<'a>, Str<'a>>;

/// Who a connection is: on every line about one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Conn<'a> {
    /// The connection's number in the run (from 1).
    pub conn: u64,
    /// The client's address and port.
    #[serde(borrow)]
    pub client: Str<'a>,
    /// The destination as dialled (`ip:port`), or as configured before it
    /// resolved.
    #[serde(borrow)]
    pub dst: Str<'a>,
    /// The name the destination was known by.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub host: Option<Str<'a>>,
    /// The proxy it came through: `run`, `expose-PORT`, `attach`,
    /// `attach-inbound`, `in-place`, or an API proxy's name.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Str<'a>>,
    /// The built-in upstream that answered it in the upstream's place
    /// (`--mock`): its API.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub mock: Option<Str<'a>>,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// Both sides sent FIN.
    Fin,
    /// RST (from a peer, or a fault) delivered to both sides.
    Reset,
    /// A fault closed the connection cleanly.
    Closed,
    /// The upstream could not be reached; the client was told so (at the
    /// SYN under interception, else with an RST).
    DialFailed,
    /// `refuse` answered the SYN.
    Refused,
    /// `connect_timeout` dropped the SYN.
    ConnectTimeout,
    /// Its proxy or rule was disabled or removed (control API).
    Disabled,
    /// netchaos shut down while the connection was open.
    Aborted,
    /// The client gave up before its handshake completed: no upstream was
    /// dialled for it, or the one dialled was closed unused.
    Abandoned,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Fin => "fin",
            Outcome::Reset => "reset",
            Outcome::Closed => "closed",
            Outcome::DialFailed => "dial_failed",
            Outcome::Refused => "refused",
            Outcome::ConnectTimeout => "connect_timeout",
            Outcome::Disabled => "disabled",
            Outcome::Aborted => "aborted",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// The path a connection's bytes took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RelayPath {
    /// The fault-free fast path (splice, or large copies).
    Splice,
    /// The stream-fault pipeline.
    Pipeline,
    /// The HTTP layer, in clear.
    Http,
    /// The HTTP layer, TLS terminated and re-originated.
    Https,
}

impl RelayPath {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RelayPath::Splice => "splice",
            RelayPath::Pipeline => "pipeline",
            RelayPath::Http => "http",
            RelayPath::Https => "https",
        }
    }
}

/// A value of a closed set ([`Outcome`], [`RelayPath`], [`Way`]) as a
/// reader takes it: one this version knows, or one a later version added
/// without a new `v` (which the version policy allows), kept as written —
/// a line is never lost for it. Written, it is always one of the set, and
/// the schema says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Known<T> {
    Is(T),
    Unknown(String),
}

/// A closed set's values by name.
pub(crate) trait Named: Copy {
    fn as_str(self) -> &'static str;
}

impl<T: Named> Known<T> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Known::Is(t) => t.as_str(),
            Known::Unknown(s) => s,
        }
    }
}

impl Named for Outcome {
    fn as_str(self) -> &'static str {
        Outcome::as_str(self)
    }
}

impl Named for RelayPath {
    fn as_str(self) -> &'static str {
        RelayPath::as_str(self)
    }
}

impl Named for Way {
    fn as_str(self) -> &'static str {
        match self {
            Way::Upstream => "upstream",
            Way::Downstream => "downstream",
        }
    }
}

/// A direction of a connection's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Way {
    /// Client to server.
    Upstream,
    /// Server to client.
    Downstream,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Close<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// The path its bytes took (none when it never carried any: refused,
    /// abandoned, failed dials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RelayPath>")]
    pub path: Option<Known<RelayPath>>,
    #[schemars(with = "Outcome")]
    pub outcome: Known<Outcome>,
    /// Bytes the relay delivered to the server, however the connection
    /// ended (the summary's count).
    pub bytes_upstream: u64,
    /// Bytes the relay delivered to the client.
    pub bytes_downstream: u64,
    /// How long it lived, in milliseconds (to the microsecond, as every
    /// `*_ms`).
    pub duration_ms: f64,
    /// Under interception: how long the SYN was held before the open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syn_ms: Option<f64>,
    /// When the upstream connected, after the open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dial_ms: Option<f64>,
    /// When its first byte reached the server, after the open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_upstream_ms: Option<f64>,
    /// When its first byte reached the client, after the open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_downstream_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
}

/// Bytes delivered over time: at most 16 buckets each way, from the first
/// byte, each `bucket_ms` long (doubled whenever the connection outlived
/// them); trailing empty buckets left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct Activity {
    /// The first bucket's start, after the open.
    pub start_ms: f64,
    pub bucket_ms: f64,
    pub upstream: Vec<u64>,
    pub downstream: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Fault<'a> {
    /// What it acted on: a connection (and, for HTTP faults, a request on
    /// it), or a DNS query.
    #[serde(flatten, borrow)]
    pub on: FaultOn<'a>,
    /// The rule it belongs to (`cli` for `--fault` flags).
    #[serde(borrow)]
    pub rule: Str<'a>,
    /// Its kind.
    #[serde(borrow)]
    pub fault: Str<'a>,
    #[serde(borrow)]
    pub params: Params<'a>,
}

/// What a fault acted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum FaultOn<'a> {
    Connection {
        #[serde(flatten, borrow)]
        conn: Conn<'a>,
        /// The direction it acted on (none: the connection as a whole).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(with = "Option<Way>")]
        direction: Option<Known<Way>>,
        /// The request it acted on (HTTP faults), with the status it
        /// answered and the gRPC status it ended a call with.
        #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
        http: Option<Request<'a>>,
    },
    Query {
        /// The namespace's resolver client (address and port).
        #[serde(borrow)]
        client: Str<'a>,
        #[serde(borrow)]
        dns: DnsQuery<'a>,
    },
}

/// One HTTP request, as the lines about it name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct Request<'a> {
    /// Its number on the connection: 0, 1, … (on HTTP/2, in the order its
    /// streams opened).
    pub request: u64,
    #[serde(borrow)]
    pub method: Str<'a>,
    /// Its path (the first 256 characters).
    #[serde(borrow)]
    pub path: Str<'a>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub host: Option<Str<'a>>,
    /// The status the client was given (or the upstream's, on `response`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The gRPC status that ended the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<u32>,
    /// Its `grpc-message`, percent-decoded (the first 256 characters).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub grpc_message: Option<Str<'a>>,
}

/// One DNS query of the namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct DnsQuery<'a> {
    /// Its number in the run (retransmissions keep it).
    pub query: u64,
    #[serde(borrow)]
    pub name: Str<'a>,
    /// `A`, `AAAA`, … or `TYPE<n>`.
    #[serde(borrow)]
    pub qtype: Str<'a>,
    /// `udp` or `tcp`.
    #[serde(borrow)]
    pub transport: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct DnsAnswered<'a> {
    #[serde(borrow)]
    pub client: Str<'a>,
    #[serde(borrow)]
    pub dns: DnsAnswer<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct DnsAnswer<'a> {
    #[serde(flatten, borrow)]
    pub query: DnsQuery<'a>,
    /// `NOERROR`, `NXDOMAIN`, `SERVFAIL`, … or `never` (nothing sent
    /// back) or `no answer`.
    #[serde(borrow)]
    pub answer: Str<'a>,
    /// Records in the answer section.
    pub records: u16,
    /// When the answer went back, after the query came (none when nothing
    /// was sent back).
    pub ms: Option<f64>,
}

/// A line about one request on a connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct OnRequest<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    #[serde(borrow)]
    pub http: Request<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct StreamReset<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// The request, with its answer's `status` if it had begun.
    #[serde(borrow)]
    pub http: Request<'a>,
    /// The RST_STREAM's error code.
    pub code: u32,
    /// Its name (`NO_ERROR`, `CANCEL`, …).
    #[serde(borrow)]
    pub reason: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RelayError<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// `dial_refused`, `dial_timeout`, `redial_failed`, `http_malformed`, …
    #[serde(borrow)]
    pub kind: Str<'a>,
    #[serde(borrow)]
    pub detail: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct TlsRefused<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// Its server name (or address) and port.
    #[serde(borrow)]
    pub destination: Str<'a>,
    /// The client's TLS alert.
    #[serde(borrow)]
    pub alert: Str<'a>,
    /// The destination's later connections are relayed untouched.
    pub passthrough: bool,
    #[serde(borrow)]
    pub advice: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Redial<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// How long the new dial took.
    pub took_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Goaway<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// `soon` (dialled again less than 100 ms before: the upstream is
    /// going), `stopping` (netchaos was), `cannot_redial` (its address or
    /// TLS setup lost).
    #[serde(borrow)]
    pub reason: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Paused<'a> {
    /// `limit` (the connection limit) or `resources` (out of descriptors).
    #[serde(borrow)]
    pub reason: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Refused<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// `limit`: the connection limit was reached.
    #[serde(borrow)]
    pub reason: Str<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Attempt<'a> {
    #[serde(flatten, borrow)]
    pub conn: Conn<'a>,
    /// When it began, on the log's clock (`t`).
    pub start: f64,
    #[serde(borrow)]
    pub http: AttemptRequest<'a>,
    /// How it failed as the client met it (none: a whole answer):
    /// `truncated`, `no_response`, `reset`, `unfollowed`, … (docs/drills.md).
    #[serde(borrow)]
    pub error: Option<Str<'a>>,
    /// From its head read to both sides done with it.
    pub ms: f64,
    /// When its answer's head went out to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_ms: Option<f64>,
    /// When its first body byte went out (the first token of a stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ms: Option<f64>,
    /// The faults that acted on it.
    #[serde(borrow)]
    pub faults: Vec<Str<'a>>,
}

/// An attempt's request, as the client sent it, and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct AttemptRequest<'a> {
    pub request: u64,
    /// `HTTP/1.1` or `HTTP/2`.
    #[serde(borrow)]
    pub proto: Str<'a>,
    #[serde(borrow)]
    pub method: Str<'a>,
    #[serde(borrow)]
    pub path: Str<'a>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub host: Option<Str<'a>>,
    /// A JSON body's top-level `model`.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub model: Option<Str<'a>>,
    /// The request headers that tie a client's retries together
    /// (lowercase names).
    #[serde(default, borrow, skip_serializing_if = "IndexMap::is_empty")]
    pub headers: IndexMap<Str<'a>, Str<'a>>,
    /// The status the client got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<u32>,
    /// The `retry-after` the client was given.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Str<'a>>,
    /// The status the upstream answered with (whatever the client got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// A hash of the body without its `model` (16 hex digits).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub body: Option<Str<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct StopIf<'a> {
    /// The condition, as given.
    #[serde(borrow)]
    pub condition: Str<'a>,
    /// Attempts in its window when it crossed, and how many failed.
    pub attempts: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FaultsEnd {
    pub at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Truncated {
    /// `--events-max`.
    pub max_bytes: u64,
    /// Bytes written before this line.
    pub written_bytes: u64,
}

/// The JSON Schema of a line as written (draft 2020-12), as `netchaos
/// schema` prints it and docs/events.schema.json holds it.
pub(crate) fn json_schema() -> String {
    // What is written (the serialize contract): a field with a default
    // for readers is still always there.
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<Line<'static>>();
    let mut s = serde_json::to_string_pretty(&schema).expect("a schema serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_schema_is_what_the_types_make() {
        let have = include_str!("../../docs/events.schema.json");
        assert!(
            have == json_schema(),
            "docs/events.schema.json is stale: run \
             `cargo run -q -- schema > docs/events.schema.json`"
        );
    }

    fn conn() -> Conn<'static> {
        Conn {
            conn: 7,
            client: "127.0.0.1:40000".into(),
            dst: "127.0.0.1:8080".into(),
            host: Some("api.test".into()),
            proxy: Some("run".into()),
            mock: None,
        }
    }

    fn request() -> Request<'static> {
        Request {
            request: 2,
            method: "POST".into(),
            path: "/v1/messages".into(),
            host: Some("api.test".into()),
            status: Some(529),
            grpc_status: None,
            grpc_message: None,
        }
    }

    fn query() -> DnsQuery<'static> {
        DnsQuery {
            query: 1,
            name: "api.test".into(),
            qtype: "A".into(),
            transport: "udp".into(),
        }
    }

    /// One event of every kind, as the writer makes them.
    fn one_of_each() -> Vec<Event<'static>> {
        let params: Params<'static> = [("status".into(), "529".into())].into_iter().collect();
        vec![
            Event::Start(Start {
                seed: 8908911256518419541,
                seed_str: "8908911256518419541".into(),
                version: "0.1.0".into(),
                mode: "run".into(),
            }),
            Event::Plan(Plan {
                argv: vec!["netchaos".into(), "run".into()],
                profiles: vec![ProfileUsed {
                    source: "flaky".into(),
                    description: "d".into(),
                }],
                rules: vec![RulePlan {
                    name: "cli".into(),
                    faults: vec![FaultPlan {
                        fault: "http_status".into(),
                        params: params.clone(),
                        active_from_ms: Some(1000),
                        active_until_ms: None,
                    }],
                }],
            }),
            Event::Open(conn()),
            Event::Close(Close {
                conn: conn(),
                path: Some(Known::Is(RelayPath::Https)),
                outcome: Known::Is(Outcome::Abandoned),
                bytes_upstream: 20,
                bytes_downstream: 0,
                duration_ms: 1.5,
                syn_ms: Some(0.2),
                dial_ms: Some(0.4),
                first_byte_upstream_ms: Some(0.5),
                first_byte_downstream_ms: None,
                activity: Some(Activity {
                    start_ms: 0.5,
                    bucket_ms: 10.0,
                    upstream: vec![20],
                    downstream: vec![],
                }),
            }),
            Event::Fault(Fault {
                on: FaultOn::Connection {
                    conn: conn(),
                    direction: Some(Known::Is(Way::Downstream)),
                    http: None,
                },
                rule: "cli".into(),
                fault: "reset".into(),
                params: params.clone(),
            }),
            Event::Fault(Fault {
                on: FaultOn::Connection {
                    conn: conn(),
                    direction: None,
                    http: Some(request()),
                },
                rule: "cli".into(),
                fault: "http_status".into(),
                params: params.clone(),
            }),
            Event::Fault(Fault {
                on: FaultOn::Query {
                    client: "192.0.2.1:5353".into(),
                    dns: query(),
                },
                rule: "cli".into(),
                fault: "dns_error".into(),
                params,
            }),
            Event::Dns(DnsAnswered {
                client: "192.0.2.1:5353".into(),
                dns: DnsAnswer {
                    query: query(),
                    answer: "NXDOMAIN".into(),
                    records: 0,
                    ms: None,
                },
            }),
            Event::Response(OnRequest {
                conn: conn(),
                http: request(),
            }),
            Event::Trailers(OnRequest {
                conn: conn(),
                http: Request {
                    grpc_status: Some(14),
                    grpc_message: Some("unavailable".into()),
                    ..request()
                },
            }),
            Event::StreamReset(StreamReset {
                conn: conn(),
                http: request(),
                code: 8,
                reason: "CANCEL".into(),
            }),
            Event::Error(RelayError {
                conn: conn(),
                kind: "dial_refused".into(),
                detail: "refused".into(),
            }),
            Event::TlsRefused(TlsRefused {
                conn: conn(),
                destination: "api.test:443".into(),
                alert: "UnknownCA".into(),
                passthrough: true,
                advice: "a".into(),
            }),
            Event::Redial(Redial {
                conn: conn(),
                took_ms: 0.3,
            }),
            Event::Goaway(Goaway {
                conn: conn(),
                reason: "soon".into(),
            }),
            Event::Paused(Paused {
                reason: "limit".into(),
            }),
            Event::Refused(Refused {
                conn: conn(),
                reason: "limit".into(),
            }),
            Event::Attempt(Attempt {
                conn: conn(),
                start: 1.25,
                http: AttemptRequest {
                    request: 0,
                    proto: "http/1.1".into(),
                    method: "POST".into(),
                    path: "/v1/messages".into(),
                    host: None,
                    model: Some("claude".into()),
                    headers: [("x-stainless-retry-count".into(), "1".into())]
                        .into_iter()
                        .collect(),
                    status: Some(429),
                    grpc_status: None,
                    retry_after: Some("2".into()),
                    upstream_status: None,
                    body: Some("00000000000000ff".into()),
                },
                error: None,
                ms: 3.5,
                head_ms: Some(3.0),
                first_ms: None,
                faults: vec!["http_status".into()],
            }),
            Event::StopIf(StopIf {
                condition: "error_rate>0.5".into(),
                attempts: 10,
                failed: 6,
            }),
            Event::FaultsEnd(FaultsEnd { at_ms: 5000 }),
            Event::Truncated(Truncated {
                max_bytes: 4096,
                written_bytes: 4000,
            }),
        ]
    }

    fn documented() -> jsonschema::Validator {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/events.schema.json")).unwrap();
        jsonschema::draft202012::new(&schema).unwrap()
    }

    /// The documented schema and what the writer writes agree: every kind
    /// validates against docs/events.schema.json and reads back the same;
    /// a field the schema does not know, a wrong type, a missing field or
    /// an unknown event does not validate.
    #[test]
    fn what_the_writer_writes_is_what_the_schema_documents() {
        let v = documented();
        let started = std::time::Instant::now();
        let mut kinds = std::collections::BTreeSet::new();
        for e in one_of_each() {
            let text = super::super::line_text(started, e.clone());
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{errors:?}\n{text}");
            assert_eq!(value["v"], VERSION);
            let back: Line<'_> = serde_json::from_str(&text).unwrap();
            assert_eq!(back.event, e, "{text}");
            kinds.insert(value["event"].as_str().unwrap().to_string());
            // Each way of breaking it is caught.
            let mut extra = value.clone();
            extra["surprise"] = 1.into();
            assert!(!v.is_valid(&extra), "unknown field passed: {text}");
            if value.get("http").is_some() {
                let mut inner = value.clone();
                inner["http"]["surprise"] = 1.into();
                assert!(!v.is_valid(&inner), "unknown http field passed: {text}");
            }
            let mut typed = value.clone();
            typed["t"] = "soon".into();
            assert!(!v.is_valid(&typed), "a string t passed: {text}");
            let mut unversioned = value.clone();
            unversioned.as_object_mut().unwrap().remove("v");
            assert!(!v.is_valid(&unversioned), "no v passed: {text}");
        }
        // A kind added to `Event` fails to compile here until it is added
        // above (and counted).
        let every = |e: &Event<'_>| match e {
            Event::Start(_)
            | Event::Plan(_)
            | Event::Open(_)
            | Event::Close(_)
            | Event::Fault(_)
            | Event::Dns(_)
            | Event::Response(_)
            | Event::Trailers(_)
            | Event::StreamReset(_)
            | Event::Error(_)
            | Event::TlsRefused(_)
            | Event::Redial(_)
            | Event::Goaway(_)
            | Event::Paused(_)
            | Event::Refused(_)
            | Event::Attempt(_)
            | Event::StopIf(_)
            | Event::FaultsEnd(_)
            | Event::Truncated(_) => 1,
        };
        assert_eq!(every(&one_of_each()[0]), 1);
        assert_eq!(kinds.len(), 19, "one line of every kind: {kinds:?}");
        let mut unknown: serde_json::Value = serde_json::from_str(
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.1,"event":"surprise"}"#,
        )
        .unwrap();
        assert!(!v.is_valid(&unknown));
        unknown["event"] = "close".into();
        assert!(!v.is_valid(&unknown), "a close without its fields passed");
    }

    #[test]
    fn every_kind_round_trips_with_its_name() {
        let lines = [
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.1,"event":"open","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"run"}"#,
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.2,"event":"fault","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","direction":"downstream","rule":"cli","fault":"reset","params":{"after_bytes":"16384","stream":"downstream"}}"#,
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.2,"event":"fault","client":"127.0.0.1:5353","dns":{"query":3,"name":"a.test","qtype":"A","transport":"udp"},"rule":"cli","fault":"dns_error","params":{"rcode":"SERVFAIL"}}"#,
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.3,"event":"close","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","path":"splice","outcome":"abandoned","bytes_upstream":0,"bytes_downstream":0,"duration_ms":0.0}"#,
            r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":0.4,"event":"faults_end","at_ms":400}"#,
        ];
        for text in lines {
            let line: Line<'_> = serde_json::from_str(text).unwrap();
            let back: serde_json::Value = serde_json::to_value(&line).unwrap();
            let want: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(back, want, "{text}");
        }
        // A value a later version adds (without a new `v`) reads as one
        // this version does not know, not as a broken line.
        let later = r#"{"v":1,"time":"x","t":0.3,"event":"close","conn":1,"client":"c","dst":"d","path":"quic","outcome":"migrated","bytes_upstream":0,"bytes_downstream":0,"duration_ms":1.0}"#;
        let Event::Close(c) = serde_json::from_str::<Line<'_>>(later).unwrap().event else {
            panic!("a close")
        };
        assert_eq!(
            (c.outcome.as_str(), c.path.unwrap().as_str()),
            ("migrated", "quic")
        );
        // A line from before versions reads as version 0.
        let old = r#"{"time":"x","t":0.0,"event":"paused","reason":"limit"}"#;
        assert_eq!(serde_json::from_str::<Line<'_>>(old).unwrap().v, 0);
    }
}
