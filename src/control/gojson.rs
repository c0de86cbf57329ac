//! Request bodies read the way Toxiproxy's Go server reads them
//! (`encoding/json`): keys match without regard to case, unknown keys are
//! ignored, `null` leaves a field as it was, and a value of the wrong type
//! is a 400 in Go's own words — `bad request body: json: cannot unmarshal
//! string into Go struct field LatencyToxic.attributes.latency of type
//! int64` — so that a client sees the error it would from Toxiproxy.

use serde_json::{Map, Value};

use super::model::ApiError;

/// How Go names a JSON value in a type error for a field of type `ty`: a
/// number with its digits only where a number field could not hold it
/// (`number 1.5` into an `int64`), plain `number` into any other kind.
fn go_value(v: &Value, ty: &str) -> String {
    let numeric = ty.starts_with("int") || ty.starts_with("uint") || ty.starts_with("float");
    match v {
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Number(n) if numeric => format!("number {n}"),
        Value::Number(_) => "number".into(),
        Value::Null => "null".into(),
    }
}

/// The 400 for `v` in the field `path` (`Struct.field`) of Go type `ty`.
pub(crate) fn type_error(v: &Value, path: &str, ty: &str) -> ApiError {
    ApiError::bad_request(format!(
        "json: cannot unmarshal {} into Go struct field {path} of type {ty}",
        go_value(v, ty)
    ))
}

/// A string field; `None` when absent or null.
pub(crate) fn string(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(type_error(v, path, "string")),
    }
}

pub(crate) fn boolean(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(type_error(v, path, "bool")),
    }
}

/// A float field (any JSON number).
pub(crate) fn float(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
    ty: &str,
) -> Result<Option<f64>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(v) => Err(type_error(v, path, ty)),
    }
}

/// An integer field: Go takes only a number written as an integer that
/// fits (`100`, not `100.0`).
pub(crate) fn integer(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
    ty: &str,
) -> Result<Option<i64>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => match n.as_i64() {
            Some(i) if ty != "int32" || i32::try_from(i).is_ok() => Ok(Some(i)),
            _ => Err(type_error(v, path, ty)),
        },
        Some(v) => Err(type_error(v, path, ty)),
    }
}

/// An object field (`attributes`).
pub(crate) fn object(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o.clone())),
        Some(v) => Err(type_error(v, path, "map[string]interface {}")),
    }
}

/// Lower-cases the keys Go's decoding would match without regard to case:
/// those of the request's objects, and of a toxic's `attributes` (a flat
/// struct in Toxiproxy). What an attribute holds is netchaos's own data —
/// a header table, a JSON body match, a JSON merge patch — whose keys
/// keep their case, as does the name after a dotted attribute's first
/// dot (`set_query.Beta`).
pub(crate) fn lowercase_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let k = k.to_ascii_lowercase();
                    let v = match k.as_str() {
                        "attributes" => lowercase_attribute_names(v),
                        _ => lowercase_keys(v),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(lowercase_keys).collect()),
        other => other,
    }
}

fn lowercase_attribute_names(v: Value) -> Value {
    let Value::Object(m) = v else { return v };
    Value::Object(
        m.into_iter()
            .map(|(k, v)| {
                let k = match k.split_once('.') {
                    Some((key, name)) => format!("{}.{name}", key.to_ascii_lowercase()),
                    None => k.to_ascii_lowercase(),
                };
                (k, v)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_errors_read_as_go_writes_them() {
        let m = json!({"latency": "100", "jitter": 1.5, "ok": 7, "n": null})
            .as_object()
            .unwrap()
            .clone();
        let e = integer(&m, "latency", "LatencyToxic.attributes.latency", "int64").unwrap_err();
        assert_eq!(
            e.message,
            "bad request body: json: cannot unmarshal string into Go struct field LatencyToxic.attributes.latency of type int64"
        );
        let e = integer(&m, "jitter", "LatencyToxic.attributes.jitter", "int64").unwrap_err();
        assert!(
            e.message.contains("cannot unmarshal number 1.5 into"),
            "{e:?}"
        );
        assert_eq!(integer(&m, "ok", "x", "int64").unwrap(), Some(7));
        assert_eq!(integer(&m, "n", "x", "int64").unwrap(), None);
        assert_eq!(integer(&m, "absent", "x", "int64").unwrap(), None);
    }
}
