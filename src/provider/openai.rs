//! OpenAI's API (Chat Completions, Responses; Azure OpenAI alike): its
//! errors — `{"error": {"message", "type", "param", "code"}}` with an
//! `x-request-id` and, on a 429, its rate-limit headers, which its SDKs
//! raise as `RateLimitError`, `InternalServerError`, … — and its streams'
//! errors: a chat-completions chunk carrying `error`, the Responses API's
//! `event: error`.

use std::time::Duration;

use super::{REQUEST_ID, ceil_secs};

/// What a stream fails with, unless named.
pub(crate) const STREAM_ERROR: &str = "server_error";

/// A stream error's message.
const MESSAGE: &str =
    "The server had an error while processing your request. (injected by netchaos)";

/// OpenAI's error for `status`: content type, body, headers.
pub(crate) fn error(
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    let mut headers = super::retry_after_ms(retry_after);
    let (kind, code, message) = match status {
        400 => ("invalid_request_error", None, "Invalid request"),
        401 => (
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided.",
        ),
        404 => ("invalid_request_error", None, "Not found"),
        429 => (
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached for requests (injected by netchaos)",
        ),
        503 => (
            "server_error",
            None,
            "The server is overloaded or not ready yet.",
        ),
        s if s >= 500 => (
            "server_error",
            None,
            "The server had an error while processing your request.",
        ),
        _ => ("invalid_request_error", None, "Error"),
    };
    headers.push(format!("x-request-id: {REQUEST_ID}"));
    if status == 429 {
        headers.push("x-ratelimit-remaining-requests: 0".into());
        if let Some(r) = retry_after {
            headers.push(format!("x-ratelimit-reset-requests: {}s", ceil_secs(r)));
        }
    }
    let body = serde_json::json!({
        "error": {"message": message, "type": kind, "param": null, "code": code}
    });
    ("application/json", body.to_string().into_bytes(), headers)
}

/// A chat-completions chunk carrying `error` (its SDK raises `APIError`).
pub(crate) fn stream_error(kind: &str) -> (Option<&'static str>, serde_json::Value) {
    (
        None,
        serde_json::json!({"error": {
            "message": MESSAGE, "type": kind, "param": null, "code": null
        }}),
    )
}

/// The Responses API's `event: error` (its SDK yields it as an event: the
/// client must look), numbered after the `events` before it, as that API
/// numbers a stream's events from 0.
pub(crate) fn responses_stream_error(
    kind: &str,
    events: u64,
) -> (Option<&'static str>, serde_json::Value) {
    (
        Some("error"),
        serde_json::json!({"type": "error", "code": kind, "message": MESSAGE,
            "param": null, "sequence_number": events}),
    )
}
