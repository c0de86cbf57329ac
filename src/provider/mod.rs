//! What netchaos knows of each LLM provider's API, one module per
//! provider: how a request to it is told apart (its hosts, its paths), the
//! error it answers with (status, body, headers: what its SDKs raise) and
//! the error event it ends a stream with. The faults that answer in a
//! provider's place (`http_status` and `respond` with an `envelope`,
//! `sse`'s `error_after_events`) take their shapes from here; the built-in
//! upstream (`mock`) speaks the same APIs' answers.
//!
//! Which provider a request goes to, for `envelope = "auto"` (a fault that
//! answers in the provider's place answers in that provider's shape, so
//! one profile serves an application that calls several): by the request's
//! host first (each provider's API host, Azure OpenAI's
//! `*.openai.azure.com`, Vertex AI's `*aiplatform.googleapis.com`, where
//! Anthropic's models are under `publishers/anthropic`), then by its path
//! (a base URL pointed at a gateway or a local mock keeps the provider's
//! paths), else Anthropic's.

pub(crate) mod anthropic;
pub(crate) mod bedrock;
pub(crate) mod gemini;
pub(crate) mod ollama;
pub(crate) mod openai;

use std::time::Duration;

/// Whose errors an `envelope` can shape a reply as; `auto`: the provider
/// the request goes to ([`Provider::of`]).
pub(crate) const ENVELOPES: &[&str] = &["anthropic", "openai", "gemini", "bedrock", "auto"];

/// The request id an injected error carries, in its header and body; each
/// reply sent gets its own hex digits in place of the zeros, so ids stay
/// unique (as the SDKs log and report them) and recognisable.
pub(crate) const REQUEST_ID: &str = "req_netchaos_000000000000000000000000";
/// Where the digits of [`REQUEST_ID`] start.
pub(crate) const ID_DIGITS: usize = "req_netchaos_".len();

/// A duration in whole seconds, rounded up (a `Retry-After`).
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `retry-after-ms`, which Anthropic's and OpenAI's SDKs read before
/// `retry-after` (whole seconds): the exact wait.
fn retry_after_ms(retry_after: Option<Duration>) -> Vec<String> {
    retry_after
        .map(|r| format!("retry-after-ms: {}", r.as_millis()))
        .into_iter()
        .collect()
}

/// A provider's error as its API sends it (by its `envelope` name):
/// content type, body, headers.
pub(crate) fn error_reply(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    match provider {
        "gemini" => gemini::error(status, retry_after),
        "bedrock" => bedrock::error(status, retry_after),
        "anthropic" => anthropic::error(status, retry_after),
        _ => openai::error(status, retry_after),
    }
}

/// A provider's mid-stream error event (by its `envelope` name, and
/// `openai-responses` for OpenAI's Responses API): the SSE event name, if
/// it has one, and the data — `events` is how many came before it.
pub(crate) fn stream_error(
    provider: &str,
    kind: &str,
    events: u64,
) -> (Option<&'static str>, serde_json::Value) {
    match provider {
        "ollama" => ollama::stream_error(kind),
        "openai" => openai::stream_error(kind),
        "gemini" => gemini::stream_error(kind),
        "bedrock" => bedrock::stream_error(kind),
        "openai-responses" => openai::responses_stream_error(kind, events),
        _ => anthropic::stream_error(kind),
    }
}

/// The error a provider's stream ends with when none is named.
pub(crate) fn default_stream_error(provider: &str) -> String {
    match provider {
        "anthropic" => anthropic::STREAM_ERROR,
        "gemini" => gemini::STREAM_ERROR,
        "ollama" => ollama::STREAM_ERROR,
        "bedrock" => bedrock::STREAM_ERROR,
        _ => openai::STREAM_ERROR,
    }
    .to_string()
}

/// Whether `kind` is an error `provider` ends a stream with; if not, what
/// it does end them with.
pub(crate) fn check_stream_error(provider: &str, kind: &str) -> Result<(), String> {
    match provider {
        "gemini" if gemini::error_named(kind).is_none() => Err(format!(
            "error_type {kind:?} is not a google.rpc code name Gemini sends: give one of {}",
            gemini::code_names().collect::<Vec<_>>().join(", ")
        )),
        "bedrock" if !bedrock::STREAM_EXCEPTIONS.contains(&kind) => Err(format!(
            "error_type {kind:?} is not an exception Bedrock streams: give one of {}",
            bedrock::STREAM_EXCEPTIONS.join(", ")
        )),
        _ => Ok(()),
    }
}

/// A provider whose errors netchaos can shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Provider {
    Anthropic,
    OpenAi,
    Gemini,
    Bedrock,
}

impl Provider {
    pub(crate) const ALL: [Provider; 4] = [
        Provider::Anthropic,
        Provider::OpenAi,
        Provider::Gemini,
        Provider::Bedrock,
    ];

    /// Its name as an `envelope` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
        }
    }

    /// The status it answers for `status`: only Anthropic sends 529
    /// (overloaded); the others say so with 503.
    pub(crate) fn status_for(self, status: u16) -> u16 {
        match (self, status) {
            (Provider::Anthropic, s) => s,
            (_, 529) => 503,
            (_, s) => s,
        }
    }

    /// The provider a request to `host` (no port) for `path` goes to.
    pub(crate) fn of(host: Option<&str>, path: &str) -> Provider {
        let host = host
            .map(|h| {
                h.rsplit_once(':')
                    .filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
                    .map_or(h, |(h, _)| h)
                    .trim_end_matches('.')
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let path = path.split('?').next().unwrap_or(path);
        if host == "api.anthropic.com" || path.contains("/publishers/anthropic/") {
            return Provider::Anthropic;
        }
        if host == "api.openai.com" || host.ends_with(".openai.azure.com") {
            return Provider::OpenAi;
        }
        if host == "generativelanguage.googleapis.com"
            || host.ends_with("aiplatform.googleapis.com")
        {
            return Provider::Gemini;
        }
        if host.starts_with("bedrock-runtime.") || host.starts_with("bedrock-runtime-fips.") {
            return Provider::Bedrock;
        }
        if path.ends_with("/messages") || path.ends_with("/messages/count_tokens") {
            Provider::Anthropic
        } else if path.ends_with("/chat/completions")
            || path.ends_with("/completions")
            || path.ends_with("/responses")
            || path.ends_with("/embeddings")
            || path.contains("/openai/")
        {
            Provider::OpenAi
        } else if path.contains(":generateContent")
            || path.contains(":streamGenerateContent")
            || path.contains("/v1beta/models")
        {
            Provider::Gemini
        } else if path.starts_with("/model/")
            && (path.contains("/invoke")
                || path.ends_with("/converse")
                || path.ends_with("/converse-stream"))
        {
            Provider::Bedrock
        } else {
            Provider::Anthropic
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_apart_by_host_then_path() {
        use Provider::*;
        let cases = [
            (Some("api.anthropic.com"), "/v1/messages", Anthropic),
            (Some("api.openai.com:443"), "/v1/chat/completions", OpenAi),
            (
                Some("myco.openai.azure.com"),
                "/openai/deployments/x/chat/completions?api-version=1",
                OpenAi,
            ),
            (
                Some("generativelanguage.googleapis.com"),
                "/v1beta/models/gemini-2.0-flash:generateContent",
                Gemini,
            ),
            (
                Some("us-east5-aiplatform.googleapis.com"),
                "/v1/projects/p/locations/l/publishers/anthropic/models/claude:rawPredict",
                Anthropic,
            ),
            (
                Some("us-east5-aiplatform.googleapis.com"),
                "/v1/projects/p/locations/l/publishers/google/models/g:generateContent",
                Gemini,
            ),
            (
                Some("bedrock-runtime.us-east-1.amazonaws.com"),
                "/model/m/invoke",
                Bedrock,
            ),
            // A gateway or a local mock: the path tells.
            (Some("127.0.0.1:8080"), "/v1/responses", OpenAi),
            (Some("localhost"), "/v1/messages", Anthropic),
            (
                Some("gw.internal"),
                "/model/anthropic.claude/converse",
                Bedrock,
            ),
            (
                None,
                "/v1beta/models/g:streamGenerateContent?alt=sse",
                Gemini,
            ),
            (None, "/anything", Anthropic),
        ];
        for (host, path, want) in cases {
            assert_eq!(Provider::of(host, path), want, "{host:?} {path}");
        }
    }

    #[test]
    fn only_anthropic_answers_529() {
        assert_eq!(Provider::Anthropic.status_for(529), 529);
        assert_eq!(Provider::OpenAi.status_for(529), 503);
        assert_eq!(Provider::Gemini.status_for(429), 429);
    }
}
