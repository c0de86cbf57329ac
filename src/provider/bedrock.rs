//! Amazon Bedrock's runtime API: its errors — the exception's name in
//! `x-amzn-ErrorType` and `{"message"}`, which AWS's SDKs raise by that
//! name — and the exceptions its streams carry in place of an event.

use std::time::Duration;

/// Amazon Bedrock's exceptions by the HTTP status it sends them with, and
/// its messages. `InternalServerException` stands for other 5xx,
/// `ValidationException` for other 4xx.
const EXCEPTIONS: &[(u16, &str, &str)] = &[
    (
        400,
        "ValidationException",
        "Malformed input request, please reformat your input and try again.",
    ),
    (
        403,
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    (
        404,
        "ResourceNotFoundException",
        "Could not resolve the foundation model from the provided model identifier.",
    ),
    (
        408,
        "ModelTimeoutException",
        "Model has timed out in processing the request.",
    ),
    (
        424,
        "ModelErrorException",
        "The model failed to process the request.",
    ),
    (
        429,
        "ThrottlingException",
        "Too many requests, please wait before trying again. (injected by netchaos)",
    ),
    (
        500,
        "InternalServerException",
        "The server encountered an internal error while processing the request.",
    ),
    (
        503,
        "ServiceUnavailableException",
        "Bedrock is unable to process your request.",
    ),
];

/// An Amazon Bedrock error: the exception's name in `x-amzn-ErrorType`
/// (where AWS's SDKs read the error code: boto3's `ThrottlingException`,
/// which its retry modes retry) and `{"message": …}`; with `retry_after`,
/// also `x-amz-retry-after` in milliseconds, which AWS's 2026 retry
/// behaviour honours (botocore with `AWS_NEW_RETRIES_2026`).
pub(crate) fn error(
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    let (name, message) = EXCEPTIONS.iter().find(|(s, ..)| *s == status).map_or(
        match status >= 500 {
            true => (
                "InternalServerException",
                "The server encountered an internal error.",
            ),
            false => ("ValidationException", "The request was refused."),
        },
        |(_, n, m)| (*n, *m),
    );
    let mut headers = vec![
        format!("x-amzn-ErrorType: {name}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        "x-amzn-RequestId: 00000000-0000-4000-8000-6e6574636861".into(),
    ];
    if let Some(r) = retry_after {
        headers.push(format!("x-amz-retry-after: {}", r.as_millis()));
    }
    let body = serde_json::json!({ "message": message });
    ("application/json", body.to_string().into_bytes(), headers)
}

/// In an event stream (a Bedrock-compatible server's SSE): the
/// exception's payload as data (AWS's event stream names it by its type).
pub(crate) fn stream_error(kind: &str) -> (Option<&'static str>, serde_json::Value) {
    (None, exception(kind))
}

/// The exceptions Bedrock's streams (`InvokeModelWithResponseStream`,
/// `ConverseStream`) carry in place of an event; its SDKs raise them by
/// this name (boto3: `EventStreamError`, whose code is the name).
/// `modelTimeoutException` is `InvokeModelWithResponseStream`'s only:
/// boto3 reads it in a Converse stream with an empty code.
pub(crate) const STREAM_EXCEPTIONS: &[&str] = &[
    "modelStreamErrorException",
    "internalServerException",
    "throttlingException",
    "serviceUnavailableException",
    "modelTimeoutException",
    "validationException",
];

/// What a model's failure mid-answer comes as.
pub(crate) const STREAM_ERROR: &str = "modelStreamErrorException";

/// A Bedrock exception frame's payload: its message, and for a model's
/// failure the status and message the model gave.
pub(crate) fn exception(kind: &str) -> serde_json::Value {
    const MESSAGE: &str = "The model failed while streaming its answer. (injected by netchaos)";
    match kind {
        STREAM_ERROR => serde_json::json!({
            "message": MESSAGE, "originalStatusCode": 500, "originalMessage": "Internal server error"
        }),
        _ => serde_json::json!({ "message": MESSAGE }),
    }
}
