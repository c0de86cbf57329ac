//! Gemini's API (Google AI and Vertex AI): Google's API errors —
//! `{"error": {"code", "message", "status"}}` by `google.rpc.Code` name,
//! with a `RetryInfo` where a 429 says when to come back, which its SDK
//! raises as `ClientError` / `ServerError` — and the same error as the
//! chunk a failing stream ends with.

use std::time::Duration;

/// What a stream fails with, unless named.
pub(crate) const STREAM_ERROR: &str = "INTERNAL";

/// Gemini's error for `status`: content type, body, headers.
pub(crate) fn error(
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    (
        "application/json; charset=UTF-8",
        error_body(status, retry_after),
        Vec::new(),
    )
}

/// A chunk carrying Google's `error`, by its code name (checked at parse).
pub(crate) fn stream_error(kind: &str) -> (Option<&'static str>, serde_json::Value) {
    (None, error_named(kind).unwrap_or_default())
}

/// Google's `google.rpc.Code` names by the HTTP status its APIs send them
/// with, and a message like theirs. `INTERNAL` stands for other 5xx,
/// `FAILED_PRECONDITION` for other 4xx.
const CODES: &[(u16, &str, &str)] = &[
    (
        400,
        "INVALID_ARGUMENT",
        "Request contains an invalid argument.",
    ),
    (400, "FAILED_PRECONDITION", "Precondition check failed."),
    (
        401,
        "UNAUTHENTICATED",
        "API key not valid. Please pass a valid API key.",
    ),
    (
        403,
        "PERMISSION_DENIED",
        "The caller does not have permission",
    ),
    (404, "NOT_FOUND", "Requested entity was not found."),
    (409, "ABORTED", "The operation was aborted."),
    (
        429,
        "RESOURCE_EXHAUSTED",
        "Resource has been exhausted (e.g. check quota). (injected by netchaos)",
    ),
    (499, "CANCELLED", "The operation was cancelled."),
    (500, "INTERNAL", "An internal error has occurred."),
    (501, "UNIMPLEMENTED", "Method not found."),
    (
        503,
        "UNAVAILABLE",
        "The model is overloaded. Please try again later.",
    ),
    (
        504,
        "DEADLINE_EXCEEDED",
        "Deadline expired before operation could complete.",
    ),
];

/// A Google API error (Gemini's) for an HTTP status: the status, its
/// `google.rpc.Code` name, a message; with `retry_after`, a `RetryInfo`
/// detail carrying it (`retryDelay`), where Google's 429s say when to come
/// back.
fn error_body(status: u16, retry_after: Option<Duration>) -> Vec<u8> {
    let name = CODES.iter().find(|(s, ..)| *s == status).map_or(
        if status >= 500 {
            "INTERNAL"
        } else {
            "FAILED_PRECONDITION"
        },
        |c| c.1,
    );
    let mut doc = error_named(name).expect("a name from the table");
    // The status asked for, where the name stands for several (502).
    doc["error"]["code"] = status.into();
    if let Some(r) = retry_after {
        doc["error"]["details"] = serde_json::json!([{
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            // Google's JSON duration: seconds, with a fraction if any.
            "retryDelay": format!("{}s", r.as_secs_f64()),
        }]);
    }
    doc.to_string().into_bytes()
}

/// A Google API error by its `google.rpc.Code` name (`INTERNAL`,
/// `UNAVAILABLE` …), with the HTTP status Google sends it with: what a
/// Gemini stream carries when it fails mid-answer. `None` for a name
/// Google's APIs do not use.
pub(crate) fn error_named(name: &str) -> Option<serde_json::Value> {
    let (status, name, message) = CODES.iter().find(|(_, n, _)| *n == name)?;
    Some(serde_json::json!({"error": {"code": status, "message": message, "status": name}}))
}

/// The `google.rpc.Code` names an `error_type` may give for Gemini.
pub(crate) fn code_names() -> impl Iterator<Item = &'static str> {
    CODES.iter().map(|(_, n, _)| *n)
}
