//! Toxics, as Toxiproxy's API shows them, and the netchaos faults they
//! become.
//!
//! Toxiproxy's own types (`latency`, `bandwidth`, `slow_close`, `timeout`,
//! `reset_peer`, `slicer`, `limit_data`, `corrupt`, `noop`) are read as
//! Toxiproxy reads them: its attribute names and units (milliseconds, KB/s,
//! microseconds for `slicer.delay`), unknown attributes ignored, values it
//! accepts accepted (a negative latency, a toxicity of 7, a slicer with its
//! default attributes), type errors in Go's words ([`super::gojson`]).
//! Every netchaos fault is accepted too, with netchaos's parameter names
//! and units; a type both share is read in netchaos's form when an
//! attribute only netchaos knows is given (`{"delay": "100ms"}` for
//! latency), or a shared one is written as a string (`"jitter": "5ms"`).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use super::gojson;
use crate::fault::{self, FaultKind, FaultSpec, KindInfo, Layer, Stream};
use crate::ruleset::FaultEntry;
use crate::settings::Fields;
use crate::settings::files::FilePolicy;
use crate::units::Window;

/// The Toxiproxy version netchaos answers on `/version`: clients use PATCH
/// for updates from 2.6 on.
pub(crate) const TOXIPROXY_VERSION: &str = "2.12.0";

/// An error answer: `{"error": …, "status": …, "title": …}`. Toxiproxy
/// 2.12 sends `error` and `status`; before 2.2 it named the message
/// `title`, and clients written then still read it (toxiproxy-java builds
/// its `IOException` from `status` and `title`, and against 2.12 throws a
/// `NullPointerException` instead): both names, the message twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// A 400 for a body Toxiproxy could not decode.
    pub(crate) fn bad_request(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad request body: {message}"),
        )
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"error": self.message, "status": self.status.as_u16(), "title": self.message})
    }
}

/// What a toxic may use where it is built: connect and packet faults only
/// on transparent rules; files only as the operator allowed (`--api-files`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    pub connect_ok: bool,
    /// The packet delay line (`packet_latency`, `packet_rate`, bursty
    /// `loss`): netchaos's own namespace only.
    pub path_ok: bool,
    /// netchaos terminates TLS (`tls_error` has handshakes to fail).
    pub tls_ok: bool,
    /// The ranges `dns_answer random` draws from are black-holed (the plan
    /// had one when netchaos started).
    pub unrouted_ok: bool,
    pub files: FilePolicy,
}

/// Why a packet fault cannot be added (or changed) through the API where
/// it would otherwise be accepted and then do nothing.
fn not_at_run_time(kind: &FaultKind, scope: &Scope) -> Option<&'static str> {
    match kind {
        // Its drop rule is numbered and installed with the namespace, from
        // the profile; a new one would have no rule to select.
        FaultKind::Loss(l) if !l.bursty() => Some(
            "loss is installed with the namespace's packet rules when netchaos starts: \
             give it with --fault or a profile (the API can remove it, not add or change it; \
             one with burst above 1 is the packet delay line's, and can be added under run)",
        ),
        k if k.layer() == Layer::Tls && !scope.tls_ok => Some(
            "it acts on TLS handshakes netchaos terminates, and this netchaos terminates none: \
             start it with --tls",
        ),
        k if k.answers_unrouted() && !scope.unrouted_ok => Some(
            "random = true sends clients to ranges netchaos black-holes only when a profile or \
             --fault had a random dns_answer at start (some networks route them): give it there",
        ),
        k if crate::fault::path::is_path_fault(k) && !scope.path_ok => Some(
            "the packet delay line exists in netchaos run's own namespace only: \
             use `netchaos netem` inside an existing one, or latency/bandwidth on the stream",
        ),
        _ => None,
    }
}

/// A toxic's type: a netchaos fault kind (Toxiproxy's own types are among
/// them), or Toxiproxy's `noop`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ToxicType {
    Noop,
    Fault(&'static KindInfo),
}

impl ToxicType {
    fn parse(name: &str) -> Option<ToxicType> {
        if name == "noop" {
            return Some(ToxicType::Noop);
        }
        // Exactly as registered: Toxiproxy's names are case-sensitive.
        fault::KINDS
            .iter()
            .find(|k| k.name == name)
            .map(|k| ToxicType::Fault(k))
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ToxicType::Noop => "noop",
            ToxicType::Fault(k) => k.name,
        }
    }
}

/// A toxic's stream: the direction, and the word as the client wrote it
/// (Toxiproxy keeps `"UPSTREAM"` as sent).
#[derive(Clone, Debug)]
pub(crate) struct ToxicStream {
    pub dir: Stream,
    text: String,
}

impl ToxicStream {
    fn parse(text: &str) -> Option<ToxicStream> {
        let dir = match text.to_ascii_lowercase().as_str() {
            "upstream" => Stream::Upstream,
            "downstream" => Stream::Downstream,
            // A netchaos extension: both directions at once.
            "both" => Stream::Both,
            _ => return None,
        };
        Some(ToxicStream {
            dir,
            text: text.to_string(),
        })
    }

    fn of(dir: Stream) -> ToxicStream {
        ToxicStream {
            dir,
            text: dir.as_str().to_string(),
        }
    }

    /// Where it sorts in a listing: upstream first, as Toxiproxy lists.
    pub(crate) fn rank(&self) -> u8 {
        match self.dir {
            Stream::Upstream => 0,
            Stream::Downstream => 1,
            Stream::Both => 2,
        }
    }
}

/// A toxic as the API shows it.
#[derive(Debug, Clone)]
pub(crate) struct Toxic {
    pub name: String,
    pub kind: ToxicType,
    pub stream: ToxicStream,
    /// As given (Toxiproxy does not range-check it); the fault's
    /// probability is this clamped to 0..1.
    pub toxicity: f64,
    pub attributes: Map<String, Value>,
    /// The fault it became, with its identity (`None` for `noop`, and for
    /// Toxiproxy values that mean "do nothing").
    pub fault: Option<FaultEntry>,
}

impl Toxic {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "attributes": Value::Object(self.attributes.clone()),
            "name": self.name,
            "type": self.kind.name(),
            "stream": self.stream.text,
            "toxicity": go_number(self.toxicity),
        })
    }

    /// A toxic from a request body (keys already lower-cased), checked in
    /// Toxiproxy's order: stream, name, type, then attributes (the caller
    /// checks the name is free before [`Toxic::build`]). `id` identifies
    /// the fault on open connections.
    pub(crate) fn from_request(body: &Map<String, Value>) -> Result<Toxic, ApiError> {
        let stream_text = gojson::string(body, "stream", "ToxicWrapper.stream")?;
        let stream = match stream_text.as_deref() {
            None => ToxicStream::of(Stream::Downstream),
            Some(t) => ToxicStream::parse(t).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "stream was invalid, can be either upstream or downstream",
                )
            })?,
        };
        let toxicity =
            gojson::float(body, "toxicity", "ToxicWrapper.toxicity", "float32")?.unwrap_or(1.0);
        let type_text = gojson::string(body, "type", "ToxicWrapper.type")?.unwrap_or_default();
        let name = gojson::string(body, "name", "ToxicWrapper.name")?
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("{type_text}_{}", stream.text));
        let kind = ToxicType::parse(&type_text)
            .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "invalid toxic type"))?;
        let attributes =
            gojson::object(body, "attributes", "ToxicWrapper.attributes")?.unwrap_or_default();
        Ok(Toxic {
            name,
            kind,
            stream,
            toxicity,
            attributes,
            fault: None,
        })
    }

    /// Applies an update: given attributes replace theirs, the others stay;
    /// toxicity changes if given; name, type and stream are kept (as
    /// Toxiproxy ignores them). The fault keeps its identity, so open
    /// connections replace its stage in place.
    pub(crate) fn updated(
        &self,
        body: &Map<String, Value>,
        scope: &Scope,
        fresh: u64,
    ) -> Result<Toxic, ApiError> {
        let mut t = self.clone();
        // Toxiproxy decodes an update into an anonymous struct, which Go's
        // errors name as nothing: `Go struct field .toxicity`.
        if let Some(x) = gojson::float(body, "toxicity", ".toxicity", "float32")? {
            t.toxicity = x;
        }
        if let Some(m) = gojson::object(body, "attributes", ".attributes")? {
            // A Toxiproxy client updating a toxic shown in netchaos's form (a
            // profile's `latency` with `delay = "100ms"`) names Toxiproxy's
            // attributes (`latency: 1000`): its toxic is taken in that form,
            // what it had carried over, then the update applied.
            if let Some(go) = go_type(t.kind.name())
                && !m.is_empty()
                && m.iter().all(|(k, v)| go.knows(k) && !v.is_string())
                && !t.attributes.keys().all(|k| go.knows(k))
            {
                t.attributes = toxiproxy_attrs(go.name, &t.attributes);
            }
            for (k, v) in m {
                t.attributes.insert(k, v);
            }
        }
        let id = self.fault.as_ref().map_or(fresh, |f| f.id);
        t.build(scope, id)?;
        Ok(t)
    }

    /// Turns type, stream, toxicity and attributes into the fault.
    pub(crate) fn build(&mut self, scope: &Scope, id: u64) -> Result<(), ApiError> {
        let go = go_type(self.kind.name());
        let info = match self.kind {
            ToxicType::Noop => None,
            ToxicType::Fault(k) => Some(k),
        };
        let kind = match go {
            Some(go) if toxiproxy_form(go, info, &self.attributes) => {
                let (kind, attrs) = go.build(&self.attributes)?;
                self.attributes = attrs;
                kind
            }
            Some(go) => match self.netchaos_form(&scope.files) {
                Ok(kind) => Some(kind),
                // Only a Toxiproxy attribute written as a string made it
                // netchaos's form (`"jitter": "x"`): the client is most
                // likely Toxiproxy's, and gets Toxiproxy's type error
                // rather than one naming netchaos's parameters.
                Err(e) if !netchaos_only(go, info, &self.attributes) => {
                    return Err(go.build(&self.attributes).err().unwrap_or(e));
                }
                Err(e) => return Err(e),
            },
            None => Some(self.netchaos_form(&scope.files)?),
        };
        let Some(kind) = kind else {
            self.fault = None;
            return Ok(());
        };
        if kind.layer().needs_interception() && !scope.connect_ok {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "{} acts on {} and needs transparent interception (netchaos run): an explicit proxy cannot apply it",
                    self.kind.name(),
                    kind.layer().acts_on()
                ),
            ));
        }
        if let Some(why) = not_at_run_time(&kind, scope) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{}: {why}", self.kind.name()),
            ));
        }
        if !(0.0..=1.0).contains(&self.toxicity) {
            tracing::warn!(
                "toxic {:?}: toxicity {} is outside 0..1; applied as {} (as Toxiproxy does)",
                self.name,
                self.toxicity,
                self.toxicity.clamp(0.0, 1.0)
            );
        }
        let spec = FaultSpec {
            kind,
            probability: if self.toxicity.is_nan() {
                0.0
            } else {
                self.toxicity.clamp(0.0, 1.0)
            },
            stream: self.stream.dir,
            active: Window::ALWAYS,
        };
        self.fault = Some(FaultEntry {
            id,
            spec: Arc::new(spec),
        });
        Ok(())
    }

    /// A netchaos fault type with netchaos parameters.
    fn netchaos_form(&self, files: &FilePolicy) -> Result<FaultKind, ApiError> {
        let mut table = Map::new();
        table.insert("type".into(), Value::String(self.kind.name().into()));
        for (k, v) in &self.attributes {
            table.insert(k.clone(), v.clone());
        }
        let node = crate::settings::from_json(&Value::Object(table), "attributes");
        let fields = Fields::new(self.kind.name(), node)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.message))?
            .with_files(files.clone());
        fault::parse_fault(fields)
            .map(|s| s.kind)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.message))
    }
}

/// A float as Go writes it: `1`, not `1.0`.
fn go_number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// A Toxiproxy toxic type: its Go struct (named in type errors) and its
/// attributes, with their Go types.
struct GoType {
    name: &'static str,
    go: &'static str,
    attrs: &'static [(&'static str, &'static str)],
}

const GO_TYPES: &[GoType] = &[
    GoType {
        name: "latency",
        go: "LatencyToxic",
        attrs: &[("latency", "int64"), ("jitter", "int64")],
    },
    GoType {
        name: "bandwidth",
        go: "BandwidthToxic",
        attrs: &[("rate", "int64")],
    },
    GoType {
        name: "slow_close",
        go: "SlowCloseToxic",
        attrs: &[("delay", "int64")],
    },
    GoType {
        name: "timeout",
        go: "TimeoutToxic",
        attrs: &[("timeout", "int64")],
    },
    GoType {
        name: "reset_peer",
        go: "ResetToxic",
        attrs: &[("timeout", "int64")],
    },
    GoType {
        name: "slicer",
        go: "SlicerToxic",
        attrs: &[
            ("average_size", "int"),
            ("size_variation", "int"),
            ("delay", "int"),
        ],
    },
    GoType {
        name: "limit_data",
        go: "LimitDataToxic",
        attrs: &[("bytes", "int64")],
    },
    GoType {
        name: "corrupt",
        go: "CorruptToxic",
        attrs: &[("probability", "float64")],
    },
    GoType {
        name: "noop",
        go: "NoopToxic",
        attrs: &[],
    },
];

/// A toxic's netchaos parameters (`delay = "100ms"`) as Toxiproxy's
/// attributes of its type (`latency: 100`, milliseconds; KB/s for rates;
/// microseconds for a slicer's delay); what has no Toxiproxy form is left
/// out (Toxiproxy takes an absent attribute as 0).
fn toxiproxy_attrs(go: &str, attrs: &Map<String, Value>) -> Map<String, Value> {
    let text = |k: &str| {
        attrs
            .get(k)
            .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
    };
    let dur = |k: &str| text(k).and_then(|t| crate::units::parse_duration(&t).ok());
    let millis = |k: &str| dur(k).map(|d| json!(d.as_millis() as i64));
    let num = |k: &str| {
        text(k)
            .and_then(|t| crate::units::parse_size(&t).ok())
            .map(|n| json!(n))
    };
    let pairs: Vec<(&str, Option<Value>)> = match go {
        "latency" => vec![("latency", millis("delay")), ("jitter", millis("jitter"))],
        "bandwidth" => vec![(
            "rate",
            text("rate")
                .and_then(|t| crate::units::parse_rate(&t).ok())
                .map(|r| json!(r / 1000)),
        )],
        "slow_close" => vec![("delay", millis("delay"))],
        "timeout" | "reset_peer" => vec![("timeout", millis("timeout"))],
        "limit_data" => vec![("bytes", num("bytes"))],
        "slicer" => vec![
            ("average_size", num("size")),
            ("size_variation", num("size_variation")),
            ("delay", dur("delay").map(|d| json!(d.as_micros() as i64))),
        ],
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v?)))
        .collect()
}

fn go_type(name: &str) -> Option<&'static GoType> {
    GO_TYPES.iter().find(|g| g.name == name)
}

/// Whether attributes are in Toxiproxy's form: none that only netchaos
/// knows, and no shared one written as a string (`"delay": "100ms"`).
fn toxiproxy_form(go: &GoType, info: Option<&KindInfo>, attrs: &Map<String, Value>) -> bool {
    !attrs
        .iter()
        .any(|(k, v)| netchaos_knows(info, k) && (!go.knows(k) || v.is_string()))
}

/// Whether an attribute only netchaos knows is given.
fn netchaos_only(go: &GoType, info: Option<&KindInfo>, attrs: &Map<String, Value>) -> bool {
    attrs
        .keys()
        .any(|k| netchaos_knows(info, k) && !go.knows(k))
}

/// Whether netchaos's fault of this kind has a parameter named `k`.
fn netchaos_knows(info: Option<&KindInfo>, k: &str) -> bool {
    info.is_some_and(|i| i.params.iter().any(|(p, _, _)| *p == k))
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

/// A fault and the attributes that show it; `None` for values that mean
/// "do nothing".
type Built = (Option<FaultKind>, Map<String, Value>);

impl GoType {
    /// Whether Toxiproxy's toxic has an attribute named `k`.
    fn knows(&self, k: &str) -> bool {
        self.attrs.iter().any(|(a, _)| *a == k)
    }

    /// Reads the attributes as Toxiproxy's Go struct would (unknown keys
    /// ignored, absent ones 0), and makes the fault. Values Toxiproxy takes
    /// but cannot act on sensibly (a negative rate crashes it, a slicer of
    /// average size 0 recurses forever) are applied as the nearest sane
    /// thing, with a warning.
    fn build(&self, attrs: &Map<String, Value>) -> Result<Built, ApiError> {
        // Integer attributes in order; the float one (corrupt's) apart.
        let mut ints = Vec::new();
        let mut float = 0.0;
        let mut shown = Map::new();
        for (a, ty) in self.attrs {
            let path = format!("{}.attributes.{a}", self.go);
            if *ty == "float64" {
                float = gojson::float(attrs, a, &path, ty)?.unwrap_or(0.0);
                shown.insert(a.to_string(), go_number(float));
            } else {
                let v = gojson::integer(attrs, a, &path, ty)?.unwrap_or(0);
                shown.insert(a.to_string(), json!(v));
                ints.push(v);
            }
        }
        let warn = |what: &str| tracing::warn!("{} toxic: {what}", self.name);
        let pairs = |p: &[(&str, String)]| -> Result<Option<FaultKind>, ApiError> {
            let mut all = vec![("type".to_string(), self.name.to_string())];
            all.extend(p.iter().map(|(k, v)| (k.to_string(), v.clone())));
            fault::parse_fault(Fields::from_pairs(self.name, "attributes", all))
                .map(|s| Some(s.kind))
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.message))
        };
        let kind = match self.name {
            "latency" => {
                if ints[0] < 0 || ints[1] < 0 {
                    warn("a negative latency or jitter counts as 0");
                }
                // A close passes on at once, after the bytes ahead of it,
                // as Toxiproxy's latency passes it.
                pairs(&[
                    ("delay", format!("{}ms", ints[0].max(0))),
                    ("jitter", format!("{}ms", ints[1].max(0))),
                    ("ends", "at_once".into()),
                ])?
            }
            "bandwidth" if ints[0] < 0 => {
                warn("a negative rate limits nothing (Toxiproxy would crash)");
                None
            }
            // KB/s, as Toxiproxy counts them (1000 bytes); 0 holds the stream.
            // No credit: each chunk waits its own time, as Toxiproxy's does.
            "bandwidth" => pairs(&[
                ("rate", format!("{}B/s", ints[0].saturating_mul(1000))),
                ("burst", "0".into()),
            ])?,
            "slow_close" => pairs(&[("delay", format!("{}ms", ints[0].max(0)))])?,
            "timeout" => Some(FaultKind::Timeout(fault::timeout::Timeout::new(Some(ms(
                ints[0],
            ))))),
            "reset_peer" => Some(FaultKind::ResetPeer(fault::reset_peer::ResetPeer::new(ms(
                ints[0],
            )))),
            "limit_data" => Some(FaultKind::LimitData(fault::limit_data::LimitData::new(
                ints[0].max(0) as u64,
            ))),
            "slicer" if ints[0] <= 0 => {
                warn("average_size 0 slices nothing (Toxiproxy would recurse until it crashes)");
                None
            }
            "slicer" => {
                let (size, variation) = (ints[0], ints[1].max(0));
                if variation >= size {
                    warn("size_variation is held below average_size");
                }
                pairs(&[
                    ("size", size.to_string()),
                    ("size_variation", variation.min(size - 1).to_string()),
                    ("delay", format!("{}us", ints[2].max(0))),
                ])?
            }
            "corrupt" => {
                if !(0.0..=1.0).contains(&float) {
                    warn("a probability outside 0..1 is held to it");
                }
                Some(FaultKind::Corrupt(fault::corrupt::Corrupt::new(float)))
            }
            _ => None,
        };
        Ok((kind, shown))
    }
}

/// The toxics that show a rule's profile faults: netchaos types with their
/// parameters as attributes, named `TYPE_STREAM` (numbered when repeated).
pub(crate) fn toxics_for(faults: &[FaultEntry]) -> Vec<Toxic> {
    let mut out: Vec<Toxic> = Vec::new();
    for f in faults {
        let spec = &f.spec;
        let stream = ToxicStream::of(spec.stream);
        let base = format!("{}_{}", spec.name(), stream.text);
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|t| t.name == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        let attributes = spec
            .kind_params()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        out.push(Toxic {
            name,
            kind: ToxicType::Fault(spec.kind.info()),
            stream,
            toxicity: spec.probability,
            attributes,
            fault: Some(f.clone()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toxic(body: Value) -> Result<Toxic, ApiError> {
        let Value::Object(m) = gojson::lowercase_keys(body) else {
            panic!()
        };
        let mut t = Toxic::from_request(&m)?;
        t.build(&any(), 1)?;
        Ok(t)
    }

    fn any() -> Scope {
        Scope {
            connect_ok: true,
            path_ok: true,
            tls_ok: true,
            unrouted_ok: true,
            files: FilePolicy::Nowhere,
        }
    }

    /// The fault a toxic became, as `check` shows it.
    fn fault_of(t: &Toxic) -> String {
        t.fault.as_ref().unwrap().spec.to_string()
    }

    #[test]
    fn toxiproxy_latency_in_milliseconds_with_defaults_in_its_field_order() {
        let t = toxic(json!({"type": "latency", "Attributes": {"Latency": 100}})).unwrap();
        assert_eq!(t.name, "latency_downstream");
        assert_eq!(
            t.to_json().to_string(),
            r#"{"attributes":{"latency":100,"jitter":0},"name":"latency_downstream","type":"latency","stream":"downstream","toxicity":1}"#
        );
        assert_eq!(
            fault_of(&t),
            "latency:delay=100ms,ends=at_once,stream=downstream"
        );
        // Unknown attributes are ignored, as Go ignores them.
        let t =
            toxic(json!({"type": "latency", "attributes": {"latency": 5, "bogus": 1}})).unwrap();
        assert_eq!(
            t.to_json()["attributes"],
            json!({"latency": 5, "jitter": 0})
        );
    }

    #[test]
    fn what_toxiproxy_accepts_is_accepted() {
        let t = toxic(json!({"type": "latency", "toxicity": 1.5, "attributes": {"latency": -5}}))
            .unwrap();
        assert_eq!(t.toxicity, 1.5, "shown as given");
        assert_eq!(t.fault.as_ref().unwrap().spec.probability, 1.0);
        assert_eq!(t.to_json()["attributes"]["latency"], -5);
        let t = toxic(json!({"type": "latency", "stream": "UPSTREAM"})).unwrap();
        assert_eq!(t.name, "latency_UPSTREAM");
        assert_eq!(t.to_json()["stream"], "UPSTREAM");
        assert_eq!(t.stream.dir, Stream::Upstream);
        // A slicer with Toxiproxy's defaults slices nothing (Toxiproxy would crash).
        let t = toxic(json!({"type": "slicer"})).unwrap();
        assert!(t.fault.is_none());
        let t = toxic(
            json!({"type": "slicer", "attributes": {"average_size": 8, "size_variation": 8}}),
        )
        .unwrap();
        assert!(
            fault_of(&t).starts_with("slicer:size=8,size_variation=7"),
            "{}",
            fault_of(&t)
        );
        let t = toxic(json!({"type": "bandwidth", "attributes": {"rate": -1}})).unwrap();
        assert!(t.fault.is_none());
    }

    #[test]
    fn netchaos_form_for_shared_types_and_netchaos_types() {
        let t = toxic(json!({"type": "latency", "attributes": {"delay": "250ms"}})).unwrap();
        assert_eq!(fault_of(&t), "latency:delay=250ms,stream=downstream");
        let t = toxic(json!({"type": "slow_close", "attributes": {"delay": "2s"}})).unwrap();
        assert!(
            fault_of(&t).starts_with("slow_close:delay=2s"),
            "{}",
            fault_of(&t)
        );
        let t = toxic(
            json!({"type": "stall", "stream": "upstream", "attributes": {"after_bytes": 10}}),
        )
        .unwrap();
        assert!(matches!(t.fault.unwrap().spec.kind, FaultKind::Stall(_)));
        let e = toxic(json!({"type": "stall", "attributes": {"bogus": 1}})).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("unknown key \"bogus\""), "{e:?}");
    }

    #[test]
    fn toxiproxy_types_become_their_own_faults() {
        let t = toxic(json!({"type": "timeout", "attributes": {"timeout": 0}})).unwrap();
        assert!(matches!(t.fault.unwrap().spec.kind, FaultKind::Timeout(_)));
        let t = toxic(json!({"type": "reset_peer", "attributes": {"timeout": 500}})).unwrap();
        assert!(matches!(
            t.fault.unwrap().spec.kind,
            FaultKind::ResetPeer(_)
        ));
        let t = toxic(json!({"type": "limit_data", "attributes": {"bytes": 5}})).unwrap();
        assert!(matches!(
            t.fault.unwrap().spec.kind,
            FaultKind::LimitData(_)
        ));
        let t = toxic(json!({"type": "corrupt", "attributes": {"probability": 0.5}})).unwrap();
        assert!(matches!(t.fault.unwrap().spec.kind, FaultKind::Corrupt(_)));
        let t = toxic(json!({"type": "bandwidth", "attributes": {"rate": 100}})).unwrap();
        assert!(fault_of(&t).contains("rate=800kbit"), "{}", fault_of(&t));
        assert!(toxic(json!({"type": "noop"})).unwrap().fault.is_none());
    }

    #[test]
    fn errors_are_toxiproxys() {
        for (body, want) in [
            (json!({"type": "teleport"}), "invalid toxic type"),
            (json!({}), "invalid toxic type"),
            (
                json!({"type": "latency", "stream": "sideways"}),
                "stream was invalid, can be either upstream or downstream",
            ),
            (
                json!({"type": "latency", "stream": ""}),
                "stream was invalid",
            ),
            (
                json!({"type": "latency", "attributes": {"latency": "100"}}),
                "bad request body: json: cannot unmarshal string into Go struct field LatencyToxic.attributes.latency of type int64",
            ),
            (
                json!({"type": "latency", "attributes": {"jitter": "x"}}),
                "bad request body: json: cannot unmarshal string into Go struct field LatencyToxic.attributes.jitter of type int64",
            ),
            (
                json!({"type": "latency", "attributes": {"latency": 1.5}}),
                "cannot unmarshal number 1.5",
            ),
            (
                json!({"type": 7}),
                "cannot unmarshal number into Go struct field ToxicWrapper.type of type string",
            ),
        ] {
            let e = toxic(body.clone()).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(e.message.contains(want), "{body}: {e:?}");
        }
    }

    #[test]
    fn connect_faults_need_transparent_rules() {
        let Value::Object(m) = json!({"type": "refuse"}) else {
            panic!()
        };
        let mut t = Toxic::from_request(&m).unwrap();
        assert!(t.clone().build(&any(), 1).is_ok());
        let e = t.build(&Scope::default(), 1).unwrap_err();
        assert!(
            e.message.contains("needs transparent interception"),
            "{e:?}"
        );
    }

    #[test]
    fn packet_faults_that_would_do_nothing_are_refused() {
        let build = |body: Value, scope: &Scope| {
            let Value::Object(m) = body else { panic!() };
            Toxic::from_request(&m).unwrap().build(scope, 1)
        };
        let loss = json!({"type": "loss", "attributes": {"percent": 10}});
        let e = build(loss, &any()).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("--fault or a profile"), "{e:?}");
        let path = json!({"type": "packet_latency", "attributes": {"delay": "50ms"}});
        assert!(build(path.clone(), &any()).is_ok());
        let attached = Scope {
            path_ok: false,
            ..any()
        };
        let e = build(path, &attached).unwrap_err();
        assert!(e.message.contains("netchaos netem"), "{e:?}");
        let blackout = json!({"type": "blackout", "attributes": {"duration": "1s"}});
        assert!(
            build(blackout, &attached).is_ok(),
            "blackout works attached"
        );
        // Bursty loss is the delay line's: addable where it exists.
        let bursty = json!({"type": "loss", "attributes": {"percent": 10, "burst": 4}});
        assert!(build(bursty.clone(), &any()).is_ok());
        assert!(build(bursty, &attached).is_err());
        // tls_error only where netchaos terminates TLS.
        let tls = json!({"type": "tls_error", "attributes": {"error": "expired"}});
        assert!(build(tls.clone(), &any()).is_ok());
        let plain = Scope {
            tls_ok: false,
            ..any()
        };
        let e = build(tls, &plain).unwrap_err();
        assert!(e.message.contains("--tls"), "{e:?}");
        // A random dns_answer only where its ranges are black-holed.
        let random = json!({"type": "dns_answer", "attributes": {"random": true}});
        assert!(build(random.clone(), &any()).is_ok());
        let unrouted = Scope {
            unrouted_ok: false,
            ..any()
        };
        let e = build(random, &unrouted).unwrap_err();
        assert!(e.message.contains("black-holes"), "{e:?}");
    }

    #[test]
    fn partial_updates_keep_other_attributes() {
        let t = toxic(json!({"type": "latency", "toxicity": 0.5, "attributes": {"latency": 100, "jitter": 10}}))
            .unwrap();
        let Value::Object(up) =
            json!({"attributes": {"latency": 300}, "type": "bandwidth", "stream": "upstream"})
        else {
            panic!()
        };
        let u = t.updated(&up, &any(), 9).unwrap();
        assert_eq!(
            u.to_json()["attributes"],
            json!({"latency": 300, "jitter": 10})
        );
        assert_eq!(u.toxicity, 0.5, "kept when not given");
        assert_eq!(
            u.kind.name(),
            "latency",
            "type and stream are not changed by an update"
        );
        assert_eq!(
            u.fault.as_ref().unwrap().id,
            t.fault.as_ref().unwrap().id,
            "same identity"
        );
    }
}
