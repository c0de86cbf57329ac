//! Ollama's API (and other local model servers' NDJSON streams): the
//! line carrying an `error` string that ends a failing stream (its SDK
//! raises `ResponseError`).

/// What Ollama says when its model runner dies mid-answer.
pub(crate) const STREAM_ERROR: &str = "model runner has unexpectedly stopped, this may be due to resource \
     limitations or an internal error, check ollama server logs for details (injected by netchaos)";

/// A line carrying an `error` string.
pub(crate) fn stream_error(kind: &str) -> (Option<&'static str>, serde_json::Value) {
    (None, serde_json::json!({ "error": kind }))
}
