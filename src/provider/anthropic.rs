//! Anthropic's API (Messages; also on Vertex AI and Bedrock gateways): its
//! errors — `{"type": "error", "error": {"type", "message"}}` with a
//! `request-id`, the `type` by status, which its SDKs raise as
//! `RateLimitError`, `OverloadedError` (529), … — and its stream's
//! `event: error`.

use std::time::Duration;

use super::REQUEST_ID;

/// What a stream fails with, unless named.
pub(crate) const STREAM_ERROR: &str = "overloaded_error";

/// Anthropic's error for `status`: content type, body, headers.
pub(crate) fn error(
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    let mut headers = super::retry_after_ms(retry_after);
    let (kind, message) = match status {
        400 => ("invalid_request_error", "Invalid request"),
        401 => ("authentication_error", "invalid x-api-key"),
        402 => (
            "billing_error",
            "Your credit balance is too low to access the Anthropic API.",
        ),
        403 => (
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        404 => ("not_found_error", "Not found"),
        413 => (
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        ),
        429 => (
            "rate_limit_error",
            "This request would exceed your organization's rate limit. (injected by netchaos)",
        ),
        504 => ("timeout_error", "Request timed out"),
        529 => ("overloaded_error", "Overloaded"),
        s if s >= 500 => ("api_error", "Internal server error"),
        // Anthropic's documentation: also used for other 4xx codes.
        s if s >= 400 => ("invalid_request_error", "Error"),
        _ => ("api_error", "Error"),
    };
    headers.push(format!("request-id: {REQUEST_ID}"));
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": REQUEST_ID
    });
    ("application/json", body.to_string().into_bytes(), headers)
}

/// Its stream's `event: error` (its SDKs raise the error by its `type`,
/// with the response's 200).
pub(crate) fn stream_error(kind: &str) -> (Option<&'static str>, serde_json::Value) {
    (
        Some("error"),
        serde_json::json!({"type": "error", "error": {
            "type": kind,
            "message": if kind == "overloaded_error" { "Overloaded" } else { "Internal server error" }
        }}),
    )
}
