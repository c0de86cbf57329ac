//! Anthropic's Messages API, as the official SDKs read it:
//! `POST /v1/messages` (JSON, or server-sent events from `message_start`
//! to `message_stop`) and `POST /v1/messages/count_tokens`, with the
//! headers they look at (`request-id`, the `anthropic-ratelimit-*`
//! family) and Anthropic's own errors for what the API refuses: no key
//! (401), no `anthropic-version` (400), a body that is not JSON or lacks
//! `model`, `messages` or `max_tokens` (400 `invalid_request_error`), a
//! model that is not `claude-*` (404 `not_found_error`).

use std::time::Duration;

use hyper::HeaderMap;
use serde_json::{Map, Value, json};

use super::Mock;
use super::reply::{self, Reply, sse};
use super::text::{Answer, Key, TIMING, count_tokens};

/// The models the mock knows, as a glob.
pub(crate) const MODELS: &str = "claude-*";

/// The request limit the rate-limit headers state (never enforced: a
/// `http_status` 429 fault plays the limit being hit).
const REQUESTS_LIMIT: u64 = 4000;
const INPUT_TOKENS_LIMIT: u64 = 2_000_000;
const OUTPUT_TOKENS_LIMIT: u64 = 400_000;

/// Words before a tool call.
const PREAMBLE: usize = 8;
/// What a tool call's arguments count as, in output tokens.
const CALL_TOKENS: u64 = 12;

/// `POST /v1/messages`.
pub(crate) fn messages(mock: &Mock, headers: &HeaderMap, body: &[u8]) -> Reply {
    let o = match checked(headers, body, true) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let model = o["model"].as_str().unwrap_or_default().to_string();
    let input = input_tokens(&o);
    if let Some(why) = super::tools::anthropic_refusal(&o) {
        return error(400, "invalid_request_error", &why);
    }
    let call = super::tools::anthropic(&o);
    let request = Value::Object(o);
    let key = Key::of(mock.seed, "anthropic", &request);
    let limit = request["max_tokens"].as_u64();
    let mut answer = Answer::new(&key, limit);
    // A few words, then the call (as the models say what they are about
    // to do).
    if let Some(c) = &call {
        answer.preamble(if c.forced { 0 } else { PREAMBLE });
    }
    let timing = mock
        .timing
        .of(request["model"].as_str().unwrap_or_default());
    let moments = timing.moments(answer.tokens.len(), &mut key.rng(TIMING));
    let done = moments.last().copied().unwrap_or(timing.ttft);
    let stop_reason = match (&call, answer.cut) {
        (Some(_), _) => "tool_use",
        (None, true) => "max_tokens",
        (None, false) => "end_turn",
    };
    let tool_id = reply::id("toolu_01", 22, reply::BASE62);
    // The call's arguments count as output too.
    let output = answer.len() + call.as_ref().map_or(0, |_| CALL_TOKENS);
    let id = reply::id("msg_01", 22, reply::BASE62);
    let usage = |output: u64| {
        json!({
            "input_tokens": input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output,
            "service_tier": "standard",
        })
    };
    let mut message = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage(1),
    });
    let r = if reply::streams(request.as_object().expect("an object")) {
        let mut events = vec![
            (
                Duration::ZERO,
                sse(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": message}),
                ),
            ),
            (
                Duration::ZERO,
                sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0,
                            "content_block": {"type": "text", "text": ""}}),
                ),
            ),
            (Duration::ZERO, sse(Some("ping"), &json!({"type": "ping"}))),
        ];
        for (t, token) in moments.iter().zip(&answer.tokens) {
            events.push((
                *t,
                sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": token}}),
                ),
            ));
        }
        let mut tail = vec![sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": 0}),
        )];
        if let Some(c) = &call {
            tail.push(sse(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 1,
                        "content_block": {"type": "tool_use", "id": tool_id,
                                          "name": c.name, "input": {}}}),
            ));
            for piece in super::tools::pieces(&c.input.to_string()) {
                tail.push(sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 1,
                            "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            tail.push(sse(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 1}),
            ));
        }
        tail.push(sse(
            Some("message_delta"),
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                    "usage": {"output_tokens": output}}),
        ));
        tail.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
        events.extend(tail.drain(..).map(|e| (done, e)));
        Reply::events(events)
    } else {
        let mut content = vec![json!({"type": "text", "text": answer.text()})];
        if let Some(c) = &call {
            content
                .push(json!({"type": "tool_use", "id": tool_id, "name": c.name, "input": c.input}));
        }
        message["content"] = Value::Array(content);
        message["stop_reason"] = json!(stop_reason);
        message["usage"] = usage(output);
        Reply::json(200, &message, done)
    };
    with_headers(r, input, answer.len())
}

/// `POST /v1/messages/count_tokens`: at once.
pub(crate) fn count(headers: &HeaderMap, body: &[u8]) -> Reply {
    let o = match checked(headers, body, false) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let input = input_tokens(&o);
    with_headers(
        Reply::json(200, &json!({"input_tokens": input}), Duration::ZERO),
        input,
        0,
    )
}

/// Anthropic's error: its type and message in its envelope, with a
/// request id in the body and the header.
pub(crate) fn error(status: u16, kind: &str, message: &str) -> Reply {
    let id = request_id();
    Reply::json(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": id}),
        Duration::ZERO,
    )
    .header("request-id", id)
}

fn request_id() -> String {
    reply::id("req_011C", 20, reply::BASE62)
}

/// The request as the API checks it before it is answered: authenticated,
/// versioned, a JSON object with `model`, `messages` and (to be answered,
/// `answers`) `max_tokens`, for a model it knows.
fn checked(headers: &HeaderMap, body: &[u8], answers: bool) -> Result<Map<String, Value>, Reply> {
    let bad = |m: &str| error(400, "invalid_request_error", m);
    if !headers.contains_key("x-api-key") && !headers.contains_key("authorization") {
        return Err(error(
            401,
            "authentication_error",
            "x-api-key header is required",
        ));
    }
    if !headers.contains_key("anthropic-version") {
        return Err(bad("anthropic-version: header is required"));
    }
    let o = reply::object(body).map_err(|e| bad(&e))?;
    let model = match o.get("model") {
        None | Some(Value::Null) => return Err(bad("model: Field required")),
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(bad("model: Input should be a valid string")),
    };
    match o.get("messages") {
        None | Some(Value::Null) => return Err(bad("messages: Field required")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(bad("messages: at least one message is required"));
        }
        Some(Value::Array(a)) => {
            for (i, m) in a.iter().enumerate() {
                match m.get("role").and_then(Value::as_str) {
                    Some("user" | "assistant") => {}
                    _ => {
                        return Err(bad(&format!(
                            "messages.{i}.role: Input should be 'user' or 'assistant'"
                        )));
                    }
                }
                if m.get("content").is_none() {
                    return Err(bad(&format!("messages.{i}.content: Field required")));
                }
            }
        }
        Some(_) => return Err(bad("messages: Input should be a valid list")),
    }
    if answers {
        match reply::positive(&o, "max_tokens") {
            Ok(Some(_)) => {}
            Ok(None) => return Err(bad("max_tokens: Field required")),
            Err(()) => {
                return Err(bad(
                    "max_tokens: Input should be a valid integer greater than or equal to 1",
                ));
            }
        }
        if o.get("stream")
            .is_some_and(|s| !s.is_boolean() && !s.is_null())
        {
            return Err(bad("stream: Input should be a valid boolean"));
        }
    }
    if !wildmatch::WildMatch::new(MODELS).matches(&model) {
        return Err(error(404, "not_found_error", &format!("model: {model}")));
    }
    Ok(o)
}

/// The prompt's tokens: its system prompt, messages and tools.
fn input_tokens(o: &Map<String, Value>) -> u64 {
    count_tokens(
        ["system", "messages", "tools"]
            .iter()
            .filter_map(|k| o.get(*k)),
    )
}

/// The headers of every answer: its request id and the rate limits, as
/// if this request were the only one of the minute.
fn with_headers(r: Reply, input: u64, output: u64) -> Reply {
    let reset = reply::rfc3339_in(Duration::from_secs(1));
    let tokens_limit = INPUT_TOKENS_LIMIT + OUTPUT_TOKENS_LIMIT;
    r.header("request-id", request_id())
        .header(
            "anthropic-organization-id",
            "00000000-0000-4000-8000-6e6574636861",
        )
        .header(
            "anthropic-ratelimit-requests-limit",
            REQUESTS_LIMIT.to_string(),
        )
        .header(
            "anthropic-ratelimit-requests-remaining",
            (REQUESTS_LIMIT - 1).to_string(),
        )
        .header("anthropic-ratelimit-requests-reset", reset.clone())
        .header(
            "anthropic-ratelimit-input-tokens-limit",
            INPUT_TOKENS_LIMIT.to_string(),
        )
        .header(
            "anthropic-ratelimit-input-tokens-remaining",
            INPUT_TOKENS_LIMIT.saturating_sub(input).to_string(),
        )
        .header("anthropic-ratelimit-input-tokens-reset", reset.clone())
        .header(
            "anthropic-ratelimit-output-tokens-limit",
            OUTPUT_TOKENS_LIMIT.to_string(),
        )
        .header(
            "anthropic-ratelimit-output-tokens-remaining",
            OUTPUT_TOKENS_LIMIT.saturating_sub(output).to_string(),
        )
        .header("anthropic-ratelimit-output-tokens-reset", reset.clone())
        .header("anthropic-ratelimit-tokens-limit", tokens_limit.to_string())
        .header(
            "anthropic-ratelimit-tokens-remaining",
            tokens_limit.saturating_sub(input + output).to_string(),
        )
        .header("anthropic-ratelimit-tokens-reset", reset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::timing::Timing;

    fn mock() -> Mock {
        Mock::new(
            vec![crate::mock::Api::Anthropic],
            3,
            Timing {
                ttft: Duration::from_millis(100),
                jitter: Duration::ZERO,
                tokens_per_s: 100.0,
            },
        )
    }

    fn sdk_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "test".parse().unwrap());
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        h
    }

    fn body(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn ask(max_tokens: u64, stream: bool) -> Vec<u8> {
        body(
            json!({"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "stream": stream,
                    "messages": [{"role": "user", "content": "Hello there"}]}),
        )
    }

    #[test]
    fn a_json_answer_is_a_message() {
        let r = messages(&mock(), &sdk_headers(), &ask(10, false));
        assert_eq!(r.status, 200);
        assert_eq!(r.get("content-type"), Some("application/json"));
        assert!(r.get("request-id").unwrap().starts_with("req_"));
        assert_eq!(
            r.get("anthropic-ratelimit-requests-remaining"),
            Some("3999")
        );
        let m: Value = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(m["type"], "message");
        assert_eq!(m["model"], "claude-sonnet-4-5");
        assert_eq!(m["stop_reason"], "max_tokens");
        assert_eq!(m["usage"]["output_tokens"], 10);
        assert_eq!(m["usage"]["input_tokens"], 3, "user, Hello, there");
        let text = m["content"][0]["text"].as_str().unwrap();
        assert_eq!(text.split_whitespace().count(), 10);
        // Ready once the last token is: 100ms, then 9 gaps of 10ms.
        let super::super::reply::Payload::Whole { at, .. } = r.payload else {
            panic!("whole")
        };
        assert_eq!(at, Duration::from_millis(190));
    }

    #[test]
    fn a_stream_carries_the_same_text_in_order() {
        let whole: Value =
            serde_json::from_slice(&messages(&mock(), &sdk_headers(), &ask(1000, false)).body())
                .unwrap();
        assert_eq!(whole["stop_reason"], "end_turn");
        let r = messages(&mock(), &sdk_headers(), &ask(1000, true));
        assert_eq!(
            r.get("content-type"),
            Some("text/event-stream; charset=utf-8")
        );
        let super::super::reply::Payload::Stream(events) = &r.payload else {
            panic!("a stream")
        };
        assert!(events.windows(2).all(|w| w[0].0 <= w[1].0));
        let body = String::from_utf8(r.body()).unwrap();
        let names: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
        assert_eq!(
            names[names.len() - 3..],
            ["content_block_stop", "message_delta", "message_stop"]
        );
        let mut text = String::new();
        let mut stop = None;
        for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let e: Value = serde_json::from_str(data).unwrap();
            if e["type"] == "content_block_delta" {
                text.push_str(e["delta"]["text"].as_str().unwrap());
            }
            if e["type"] == "message_delta" {
                stop = Some(e["delta"]["stop_reason"].clone());
                assert_eq!(e["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
            }
        }
        assert_eq!(text, whole["content"][0]["text"].as_str().unwrap());
        assert_eq!(stop, Some(json!("end_turn")));
    }

    #[test]
    fn what_the_api_refuses_it_refuses_in_its_own_words() {
        let m = mock();
        let err = |r: Reply| {
            let v: Value = serde_json::from_slice(&r.body()).unwrap();
            assert_eq!(v["type"], "error");
            assert!(r.get("request-id").is_some());
            (
                r.status,
                v["error"]["type"].as_str().unwrap().to_string(),
                v["error"]["message"].as_str().unwrap().to_string(),
            )
        };
        let no_max =
            body(json!({"model": "claude-x", "messages": [{"role": "user", "content": "a"}]}));
        let (s, t, msg) = err(messages(&m, &sdk_headers(), &no_max));
        assert_eq!(
            (s, t.as_str(), msg.as_str()),
            (400, "invalid_request_error", "max_tokens: Field required")
        );
        // Counting needs no max_tokens.
        let r = count(&sdk_headers(), &no_max);
        assert_eq!(r.status, 200);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body()).unwrap(),
            json!({"input_tokens": 2})
        );
        let gpt = body(
            json!({"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "a"}]}),
        );
        assert_eq!(err(messages(&m, &sdk_headers(), &gpt)).0, 404);
        assert_eq!(err(messages(&m, &sdk_headers(), b"{")).0, 400);
        assert_eq!(err(messages(&m, &HeaderMap::new(), &ask(1, false))).0, 401);
        let mut unversioned = sdk_headers();
        unversioned.remove("anthropic-version");
        assert_eq!(err(messages(&m, &unversioned, &ask(1, false))).0, 400);
        let empty = body(json!({"model": "claude-x", "max_tokens": 5, "messages": []}));
        assert!(
            err(messages(&m, &sdk_headers(), &empty))
                .2
                .contains("at least one")
        );
        let zero = body(
            json!({"model": "claude-x", "max_tokens": 0, "messages": [{"role": "user", "content": "a"}]}),
        );
        assert_eq!(err(messages(&m, &sdk_headers(), &zero)).0, 400);
    }
}
