//! Toxics, as Toxiproxy's API shows them, and the netchaos faults they
//! become.
//!
//! Toxiproxy's own types keep Toxiproxy's attribute names and units
//! (`latency`/`jitter` in ms, `bandwidth.rate` in KB/s with 0 meaning a
//! stall, `slicer.delay` in µs, …). Every netchaos fault is accepted too,
//! with its netchaos parameter names and units. A type both share
//! (`latency`, `bandwidth`, `slicer`, `slow_close`) is read in Toxiproxy's
//! form when every attribute is one of Toxiproxy's and a number, and in
//! netchaos's form otherwise (`{"delay": "100ms"}`).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::fault::{self, FaultKind, FaultSpec, Stream};
use crate::ruleset::FaultEntry;
use crate::settings::Fields;
use crate::settings::files::FilePolicy;
use crate::units::Window;

/// The Toxiproxy version netchaos answers on `/version`: clients use PATCH
/// for updates from 2.6 on.
pub(crate) const TOXIPROXY_VERSION: &str = "2.12.0";

/// An error answer: `{"error": …, "status": …}`.
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

    pub(crate) fn bad_request(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad request body: {message}"),
        )
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"error": self.message, "status": self.status.as_u16()})
    }
}

/// What a toxic may use where it is built: connect and packet faults only
/// on transparent rules; files only as the operator allowed (`--api-files`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    pub connect_ok: bool,
    pub files: FilePolicy,
}

/// A toxic as the API shows it.
#[derive(Debug, Clone)]
pub(crate) struct Toxic {
    pub name: String,
    pub kind: String,
    pub stream: String,
    pub toxicity: f64,
    pub attributes: Map<String, Value>,
    /// The fault it became, with its identity (`None` for `noop`).
    pub fault: Option<FaultEntry>,
}

impl Toxic {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": Value::Object(self.attributes.clone()),
        })
    }

    /// A toxic from a request body (keys already lower-cased), with
    /// Toxiproxy's defaults: downstream, toxicity 1, name `TYPE_STREAM`.
    /// `id` identifies the fault on open connections.
    pub(crate) fn from_request(
        body: &Map<String, Value>,
        scope: &Scope,
        id: u64,
    ) -> Result<Toxic, ApiError> {
        let kind = match body.get("type") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(_) => return Err(ApiError::bad_request("type must be a string")),
            None => return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid toxic type")),
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => "downstream".to_string(),
            Some(Value::String(s)) if ["upstream", "downstream", "both"].contains(&s.as_str()) => {
                s.clone()
            }
            Some(_) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "stream was invalid, can be either upstream or downstream",
                ));
            }
        };
        let toxicity = toxicity(body.get("toxicity"), 1.0)?;
        let name = match body.get("name") {
            None | Some(Value::Null) => format!("{kind}_{stream}"),
            Some(Value::String(n)) if n.is_empty() => format!("{kind}_{stream}"),
            Some(Value::String(n)) => n.clone(),
            Some(_) => return Err(ApiError::bad_request("name must be a string")),
        };
        let attributes = match body.get("attributes") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(ApiError::bad_request("attributes must be an object")),
        };
        let mut t = Toxic {
            name,
            kind,
            stream,
            toxicity,
            attributes,
            fault: None,
        };
        t.build(scope, id)?;
        Ok(t)
    }

    /// Applies a partial update: given attributes replace theirs, the others
    /// stay; toxicity changes if given. `fresh` identifies the fault if the
    /// toxic had none (a noop).
    pub(crate) fn updated(
        &self,
        body: &Map<String, Value>,
        scope: &Scope,
        fresh: u64,
    ) -> Result<Toxic, ApiError> {
        let mut t = self.clone();
        if let Some(v) = body.get("toxicity") {
            t.toxicity = toxicity(Some(v), self.toxicity)?;
        }
        match body.get("attributes") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    t.attributes.insert(k.clone(), v.clone());
                }
            }
            Some(_) => return Err(ApiError::bad_request("attributes must be an object")),
        }
        // The same identity with new parameters: open connections replace
        // the fault's stage in place.
        let id = self.fault.as_ref().map_or(fresh, |f| f.id);
        t.build(scope, id)?;
        Ok(t)
    }

    /// Turns type, stream, toxicity and attributes into the fault (filling
    /// in Toxiproxy's defaults for its own types).
    fn build(&mut self, scope: &Scope, id: u64) -> Result<(), ApiError> {
        if self.kind == "noop" {
            self.fault = None;
            return Ok(());
        }
        let stream = match self.stream.as_str() {
            "upstream" => Stream::Upstream,
            "both" => Stream::Both,
            _ => Stream::Downstream,
        };
        let kind = match toxiproxy_form(&self.kind, &self.attributes) {
            Some(form) => {
                let (kind, full) = form?;
                self.attributes = full;
                kind
            }
            None => self.netchaos_form(&scope.files)?,
        };
        if kind.layer().needs_interception() && !scope.connect_ok {
            return Err(ApiError::bad_request(format!(
                "{} acts on {} and needs transparent interception (netchaos run): an explicit proxy cannot apply it",
                self.kind,
                kind.layer().acts_on()
            )));
        }
        let spec = FaultSpec {
            kind,
            probability: self.toxicity,
            stream,
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
        if fault::find_kind(&self.kind).is_none() {
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid toxic type"));
        }
        let mut table = Map::new();
        table.insert("type".into(), Value::String(self.kind.clone()));
        for (k, v) in &self.attributes {
            table.insert(k.clone(), v.clone());
        }
        let node = crate::settings::from_json(&Value::Object(table), "attributes");
        let fields = Fields::new(self.kind.clone(), node)
            .map_err(|e| ApiError::bad_request(e.message))?
            .with_files(files.clone());
        fault::parse_fault(fields)
            .map(|s| s.kind)
            .map_err(|e| ApiError::bad_request(e.message))
    }
}

fn toxicity(v: Option<&Value>, default: f64) -> Result<f64, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
            _ => Err(ApiError::bad_request(
                "toxicity must be a number from 0 to 1",
            )),
        },
        Some(_) => Err(ApiError::bad_request(
            "toxicity must be a number from 0 to 1",
        )),
    }
}

/// Toxiproxy's attributes (all numbers) and their defaults, per type.
fn toxiproxy_attrs(kind: &str) -> Option<&'static [(&'static str, i64)]> {
    Some(match kind {
        "latency" => &[("latency", 0), ("jitter", 0)],
        "bandwidth" => &[("rate", 0)],
        "slow_close" => &[("delay", 0)],
        "timeout" => &[("timeout", 0)],
        "reset_peer" => &[("timeout", 0)],
        "slicer" => &[("average_size", 0), ("size_variation", 0), ("delay", 0)],
        "limit_data" => &[("bytes", 0)],
        _ => return None,
    })
}

/// The fault for a Toxiproxy-form toxic, and its attributes with defaults;
/// `None` when the toxic is not in Toxiproxy's form.
/// A fault, and the attributes that describe it (defaults filled in).
type Built = (FaultKind, Map<String, Value>);

fn toxiproxy_form(kind: &str, attrs: &Map<String, Value>) -> Option<Result<Built, ApiError>> {
    let known = toxiproxy_attrs(kind)?;
    let only_known_numbers = attrs
        .iter()
        .all(|(k, v)| known.iter().any(|(n, _)| n == k) && v.is_number());
    // Toxiproxy-only types must be in Toxiproxy's form.
    let netchaos_type = fault::find_kind(kind).is_some();
    if !only_known_numbers && netchaos_type {
        return None;
    }
    Some((|| {
        let mut full = Map::new();
        let mut get = |name: &str, default: i64| -> Result<u64, ApiError> {
            let v = match attrs.get(name) {
                None => default,
                Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i,
                    (None, Some(x)) if x.fract() == 0.0 && x.abs() < 9e15 => x as i64,
                    (None, Some(x)) if x.fract() == 0.0 || n.is_u64() => {
                        return Err(ApiError::bad_request(format!(
                            "{kind}.{name} is too large: {n} (at most {})",
                            i64::MAX
                        )));
                    }
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "{kind}.{name} must be a whole number, got {n}"
                        )));
                    }
                },
                Some(_) => {
                    return Err(ApiError::bad_request(format!(
                        "{kind}.{name} must be a number"
                    )));
                }
            };
            if v < 0 {
                return Err(ApiError::bad_request(format!(
                    "{kind}.{name} must not be negative"
                )));
            }
            full.insert(name.to_string(), json!(v));
            Ok(v as u64)
        };
        // Toxiproxy's attributes in netchaos's words (units spelt out), read
        // by the one parser every fault goes through.
        let ms = |n: u64| format!("{n}ms");
        let pairs: Vec<(&str, String)> = match kind {
            "latency" => vec![
                ("type", "latency".into()),
                ("delay", ms(get("latency", 0)?)),
                ("jitter", ms(get("jitter", 0)?)),
            ],
            // KB/s, as Toxiproxy counts them (1000 bytes); 0 stalls.
            "bandwidth" => vec![
                ("type", "bandwidth".into()),
                (
                    "rate",
                    format!("{}B/s", get("rate", 0)?.saturating_mul(1000)),
                ),
            ],
            "slow_close" => vec![
                ("type", "slow_close".into()),
                ("delay", ms(get("delay", 0)?)),
            ],
            "timeout" => match get("timeout", 0)? {
                0 => vec![("type", "stall".into()), ("after", "0s".into())],
                t => vec![
                    ("type", "stall".into()),
                    ("after", "0s".into()),
                    ("duration", ms(t)),
                    ("then", "close".into()),
                ],
            },
            "reset_peer" => match get("timeout", 0)? {
                0 => vec![("type", "reset".into())],
                t => vec![("type", "reset".into()), ("after", ms(t))],
            },
            "slicer" => {
                let size = get("average_size", 0)?;
                if size == 0 {
                    return Err(ApiError::bad_request(
                        "slicer.average_size must be more than 0",
                    ));
                }
                vec![
                    ("type", "slicer".into()),
                    ("size", size.to_string()),
                    ("size_variation", get("size_variation", 0)?.to_string()),
                    ("delay", format!("{}us", get("delay", 0)?)),
                ]
            }
            "limit_data" => vec![
                ("type", "close".into()),
                ("after_bytes", get("bytes", 0)?.to_string()),
            ],
            _ => unreachable!("listed in toxiproxy_attrs"),
        };
        let pairs = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let spec = fault::parse_fault(Fields::from_pairs(kind, "attributes", pairs))
            .map_err(|e| ApiError::bad_request(e.message))?;
        let kind = spec.kind;
        Ok((kind, full))
    })())
}

/// The toxics that show a rule's profile faults: netchaos types with their
/// parameters as attributes, named `TYPE_STREAM` (numbered when repeated).
pub(crate) fn toxics_for(faults: &[FaultEntry]) -> Vec<Toxic> {
    let mut out: Vec<Toxic> = Vec::new();
    for f in faults {
        let spec = &f.spec;
        let stream = spec.stream.as_str().to_string();
        let base = format!("{}_{stream}", spec.name());
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|t| t.name == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        let attributes = spec
            .kind
            .params()
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect();
        out.push(Toxic {
            name,
            kind: spec.name().to_string(),
            stream,
            toxicity: spec.probability,
            attributes,
            fault: Some(f.clone()),
        });
    }
    out
}

/// Lower-cases every object key, as Go's JSON decoding (and so Toxiproxy)
/// matches keys without regard to case.
pub(crate) fn lowercase_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), lowercase_keys(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(lowercase_keys).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toxic(body: Value) -> Result<Toxic, ApiError> {
        let Value::Object(m) = lowercase_keys(body) else {
            panic!()
        };
        Toxic::from_request(&m, &any(), 1)
    }

    fn any() -> Scope {
        Scope {
            connect_ok: true,
            files: FilePolicy::Nowhere,
        }
    }

    #[test]
    fn toxiproxy_latency_in_milliseconds_with_defaults() {
        let t = toxic(json!({"type": "latency", "Attributes": {"Latency": 100}})).unwrap();
        assert_eq!(t.name, "latency_downstream");
        assert_eq!(t.toxicity, 1.0);
        assert_eq!(
            t.to_json()["attributes"],
            json!({"latency": 100, "jitter": 0})
        );
        assert_eq!(fault_of(&t), "latency:delay=100ms,stream=downstream");
    }

    /// The fault a toxic became, as `check` shows it.
    fn fault_of(t: &Toxic) -> String {
        t.fault.as_ref().unwrap().spec.to_string()
    }

    #[test]
    fn netchaos_form_for_shared_types_and_netchaos_types() {
        let t = toxic(json!({"type": "latency", "attributes": {"delay": "250ms"}})).unwrap();
        assert_eq!(fault_of(&t), "latency:delay=250ms,stream=downstream");
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
    fn bandwidth_is_kilobytes_per_second_and_zero_stalls() {
        let t = toxic(json!({"type": "bandwidth", "attributes": {"rate": 100}})).unwrap();
        assert!(fault_of(&t).contains("(100000 B/s)"), "{}", fault_of(&t));
        let t = toxic(json!({"type": "bandwidth", "attributes": {"rate": 0}})).unwrap();
        assert!(fault_of(&t).contains("(0 B/s)"), "{}", fault_of(&t));
    }

    #[test]
    fn timeout_reset_peer_limit_data_slicer_noop() {
        let t = toxic(json!({"type": "timeout", "attributes": {"timeout": 0}})).unwrap();
        assert!(
            fault_of(&t).starts_with("stall:after=0s,duration=forever"),
            "{}",
            fault_of(&t)
        );
        let t = toxic(json!({"type": "limit_data", "attributes": {"bytes": 5}})).unwrap();
        assert!(matches!(t.fault.unwrap().spec.kind, FaultKind::Close(_)));
        let t = toxic(json!({"type": "slicer", "attributes": {"average_size": 64, "delay": 10}}))
            .unwrap();
        assert!(
            fault_of(&t).starts_with("slicer:size=64,delay=10us"),
            "{}",
            fault_of(&t)
        );
        assert!(toxic(json!({"type": "noop"})).unwrap().fault.is_none());
    }

    #[test]
    fn bad_toxics_are_400s() {
        for (body, want) in [
            (json!({"type": "teleport"}), "invalid toxic type"),
            (json!({}), "invalid toxic type"),
            (
                json!({"type": "latency", "stream": "sideways"}),
                "stream was invalid",
            ),
            (json!({"type": "latency", "toxicity": 2}), "toxicity"),
            (
                json!({"type": "latency", "attributes": {"latency": -5}}),
                "must not be negative",
            ),
            (
                json!({"type": "latency", "attributes": []}),
                "attributes must be an object",
            ),
            (json!({"type": 7}), "type must be a string"),
            (
                json!({"type": "slicer", "attributes": {"average_size": 0}}),
                "average_size",
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
        assert!(Toxic::from_request(&m, &any(), 1).is_ok());
        let e = Toxic::from_request(&m, &Scope::default(), 1).unwrap_err();
        assert!(
            e.message.contains("needs transparent interception"),
            "{e:?}"
        );
    }

    #[test]
    fn partial_updates_keep_other_attributes() {
        let t = toxic(json!({"type": "latency", "attributes": {"latency": 100, "jitter": 10}}))
            .unwrap();
        let Value::Object(up) = json!({"attributes": {"latency": 300}}) else {
            panic!()
        };
        let u = t.updated(&up, &any(), 9).unwrap();
        assert_eq!(
            u.to_json()["attributes"],
            json!({"latency": 300, "jitter": 10})
        );
        assert_eq!(u.toxicity, 1.0);
        assert_eq!(
            u.fault.as_ref().unwrap().id,
            t.fault.as_ref().unwrap().id,
            "same identity"
        );
    }
}
