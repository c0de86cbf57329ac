//! OpenAI's Chat Completions API, as the official SDKs read it:
//! `POST /v1/chat/completions`, JSON or `data:` chunks ending with
//! `data: [DONE]` (and a last chunk of `usage` with
//! `stream_options.include_usage`), with the headers they look at
//! (`x-request-id`, the `x-ratelimit-*` family) and OpenAI's own errors:
//! no key (401), a body that is not JSON or lacks `model` or `messages`
//! (400), a model it does not know (404 `model_not_found`). What OpenAI's
//! APIs share (errors, headers, models) is here; the Responses API is
//! [`super::responses`].

use std::time::Duration;

use hyper::HeaderMap;
use serde_json::{Map, Value, json};

use super::Mock;
use super::reply::{self, Reply, sse};
use super::text::{Answer, Key, TIMING, count_tokens};

/// The models the mock knows, as globs.
pub(crate) const MODELS: &[&str] = &["gpt-*", "o[0-9]*", "chatgpt-*", "codex-*", "ft:*"];

const REQUESTS_LIMIT: u64 = 10_000;
const TOKENS_LIMIT: u64 = 30_000_000;
/// The fingerprint its answers carry.
const FINGERPRINT: &str = "fp_6e6574636861";

/// What a tool call's arguments count as, in completion tokens.
const CALL_TOKENS: u64 = 12;

/// `POST /v1/chat/completions`.
pub(crate) fn chat(mock: &Mock, headers: &HeaderMap, body: &[u8]) -> Reply {
    let o = match checked(headers, body, "messages") {
        Ok(o) => o,
        Err(r) => return r,
    };
    let limit = match limit(&o, &["max_completion_tokens", "max_tokens"]) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let model = o["model"].as_str().unwrap_or_default().to_string();
    let prompt = count_tokens(o.get("messages").into_iter().chain(o.get("tools")));
    if let Some(why) = super::tools::openai_refusal(&o) {
        return error(400, &why, Some("tool_choice"), None);
    }
    let call = super::tools::openai(&o);
    let include_usage = o
        .get("stream_options")
        .and_then(|s| s.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let streams = reply::streams(&o);
    let request = Value::Object(o);
    let key = Key::of(mock.seed, "openai", &request);
    let mut answer = Answer::new(&key, limit);
    // A call comes alone, its content null.
    if call.is_some() {
        answer.preamble(0);
    }
    let timing = mock
        .timing
        .of(request["model"].as_str().unwrap_or_default());
    let moments = timing.moments(answer.tokens.len(), &mut key.rng(TIMING));
    let done = moments.last().copied().unwrap_or(timing.ttft);
    let finish = match (&call, answer.cut) {
        (Some(_), _) => "tool_calls",
        (None, true) => "length",
        (None, false) => "stop",
    };
    let completion = answer.len() + call.as_ref().map_or(0, |_| CALL_TOKENS);
    let call_id = reply::id("call_", 24, reply::BASE62);
    let usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    });
    let id = reply::id("chatcmpl-", 29, reply::BASE62);
    let created = reply::unix_now();
    let r = if streams {
        let chunk = |choices: Value, usage: Option<&Value>| {
            let mut c = json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": FINGERPRINT,
                "choices": choices,
            });
            if include_usage {
                c["usage"] = usage.cloned().unwrap_or(Value::Null);
            }
            sse(None, &c)
        };
        let delta = |d: Value, finish: Option<&str>| json!([{"index": 0, "delta": d, "logprobs": null, "finish_reason": finish}]);
        let first = match &call {
            Some(c) => json!({"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                "function": {"name": c.name, "arguments": ""}}]}),
            None => json!({"role": "assistant", "content": "", "refusal": null}),
        };
        // A call's head comes with its arguments, after the time to
        // first token; text's role at once, as the API sends it.
        let at = if call.is_some() { done } else { Duration::ZERO };
        let mut events = vec![(at, chunk(delta(first, None), None))];
        for (t, token) in moments.iter().zip(&answer.tokens) {
            events.push((*t, chunk(delta(json!({"content": token}), None), None)));
        }
        if let Some(c) = &call {
            for piece in super::tools::pieces(&c.input.to_string()) {
                let d = json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]});
                events.push((done, chunk(delta(d, None), None)));
            }
        }
        events.push((done, chunk(delta(json!({}), Some(finish)), None)));
        if include_usage {
            events.push((done, chunk(json!([]), Some(&usage))));
        }
        events.push((done, bytes::Bytes::from_static(b"data: [DONE]\n\n")));
        Reply::events(events)
    } else {
        let answer = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": match &call {
                    Some(c) => json!({"role": "assistant", "content": null, "refusal": null,
                        "annotations": [], "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": c.name, "arguments": c.input.to_string()}}]}),
                    None => json!({"role": "assistant", "content": answer.text(),
                                   "refusal": null, "annotations": []}),
                },
                "logprobs": null,
                "finish_reason": finish,
            }],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": FINGERPRINT,
        });
        Reply::json(200, &answer, done)
    };
    with_headers(r, done, prompt + limit.unwrap_or(0))
}

/// OpenAI's error envelope, with a request id in the header.
pub(crate) fn error(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Reply {
    Reply::json(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error",
                          "param": param, "code": code}}),
        Duration::ZERO,
    )
    .header("x-request-id", request_id())
}

fn request_id() -> String {
    reply::id("req_", 32, reply::HEX)
}

/// The request as OpenAI's APIs check it: authenticated, a JSON object
/// with a known `model` and the `required` field (`messages`, or none).
pub(crate) fn checked(
    headers: &HeaderMap,
    body: &[u8],
    required: &str,
) -> Result<Map<String, Value>, Reply> {
    if !headers.contains_key("authorization") && !headers.contains_key("api-key") {
        return Err(error(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
            None,
        ));
    }
    let o = reply::object(body).map_err(|e| {
        error(
            400,
            &format!("We could not parse the JSON body of your request. ({e})"),
            None,
            None,
        )
    })?;
    let model = match o.get("model") {
        Some(Value::String(m)) => m.clone(),
        _ => {
            return Err(error(400, "you must provide a model parameter", None, None));
        }
    };
    match o.get(required) {
        _ if required.is_empty() => {}
        None | Some(Value::Null) => {
            return Err(error(
                400,
                &format!("Missing required parameter: '{required}'."),
                Some(required),
                Some("missing_required_parameter"),
            ));
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(error(
                400,
                &format!(
                    "Invalid '{required}': empty array. Expected an array with minimum length 1, but got an empty array instead."
                ),
                Some(required),
                Some("empty_array"),
            ));
        }
        Some(Value::Array(_)) => {}
        Some(_) => {
            return Err(error(
                400,
                &format!("Invalid type for '{required}': expected an array."),
                Some(required),
                Some("invalid_type"),
            ));
        }
    }
    if o.get("stream")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return Err(error(
            400,
            "Invalid type for 'stream': expected a boolean.",
            Some("stream"),
            Some("invalid_type"),
        ));
    }
    if !MODELS
        .iter()
        .any(|g| wildmatch::WildMatch::new(g).matches(&model))
    {
        return Err(error(
            404,
            &format!("The model `{model}` does not exist or you do not have access to it."),
            None,
            Some("model_not_found"),
        ));
    }
    Ok(o)
}

/// The first of `keys` given, which must be a positive integer.
pub(crate) fn limit(o: &Map<String, Value>, keys: &[&str]) -> Result<Option<u64>, Reply> {
    for k in keys {
        match reply::positive(o, k) {
            Ok(Some(n)) => return Ok(Some(n)),
            Ok(None) => {}
            Err(()) => {
                return Err(error(
                    400,
                    &format!("Invalid '{k}': integer below minimum value. Expected a value >= 1."),
                    Some(k),
                    Some("integer_below_min_value"),
                ));
            }
        }
    }
    Ok(None)
}

/// The headers of every answer: its request id, processing time and the
/// rate limits (never enforced), `tokens` this request's share.
pub(crate) fn with_headers(r: Reply, took: Duration, tokens: u64) -> Reply {
    r.header("x-request-id", request_id())
        .header("openai-version", "2020-10-01")
        .header("openai-organization", "netchaos-mock")
        .header("openai-processing-ms", took.as_millis().to_string())
        .header("x-ratelimit-limit-requests", REQUESTS_LIMIT.to_string())
        .header("x-ratelimit-limit-tokens", TOKENS_LIMIT.to_string())
        .header(
            "x-ratelimit-remaining-requests",
            (REQUESTS_LIMIT - 1).to_string(),
        )
        .header(
            "x-ratelimit-remaining-tokens",
            TOKENS_LIMIT.saturating_sub(tokens).to_string(),
        )
        .header("x-ratelimit-reset-requests", "6ms")
        .header("x-ratelimit-reset-tokens", "0s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::timing::Timing;

    fn mock() -> Mock {
        Mock::new(
            vec![crate::mock::Api::OpenAi],
            5,
            Timing {
                ttft: Duration::from_millis(50),
                jitter: Duration::ZERO,
                tokens_per_s: 1000.0,
            },
        )
    }

    fn keyed() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer test".parse().unwrap());
        h
    }

    fn ask(extra: Value) -> Vec<u8> {
        let mut v = json!({"model": "gpt-4o-mini",
                           "messages": [{"role": "user", "content": "Say hi"}]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string().into_bytes()
    }

    #[test]
    fn a_json_answer_is_a_chat_completion() {
        let r = chat(&mock(), &keyed(), &ask(json!({"max_completion_tokens": 4})));
        assert_eq!(r.status, 200);
        assert!(r.get("x-request-id").unwrap().starts_with("req_"));
        assert!(r.get("x-ratelimit-remaining-tokens").is_some());
        let v: Value = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 4);
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(v["usage"]["total_tokens"], 7);
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(text.split_whitespace().count(), 4);
    }

    #[test]
    fn a_stream_ends_with_done_and_usage_when_asked() {
        let whole: Value =
            serde_json::from_slice(&chat(&mock(), &keyed(), &ask(json!({}))).body()).unwrap();
        for include in [false, true] {
            let r = chat(
                &mock(),
                &keyed(),
                &ask(json!({"stream": true, "stream_options": {"include_usage": include}})),
            );
            let body = String::from_utf8(r.body()).unwrap();
            assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
            assert!(!body.contains("event:"));
            let chunks: Vec<Value> = body
                .split("\n\n")
                .filter_map(|e| e.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let text: String = chunks
                .iter()
                .filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str())
                .collect();
            assert_eq!(
                text,
                whole["choices"][0]["message"]["content"].as_str().unwrap()
            );
            let finish: Vec<&Value> = chunks
                .iter()
                .filter_map(|c| c["choices"].get(0).map(|x| &x["finish_reason"]))
                .filter(|f| !f.is_null())
                .collect();
            assert_eq!(finish, [&json!("stop")]);
            let last = chunks.last().unwrap();
            match include {
                true => {
                    assert_eq!(last["choices"], json!([]));
                    assert_eq!(last["usage"], whole["usage"]);
                    assert!(chunks[0]["usage"].is_null() && chunks[0].get("usage").is_some());
                }
                false => assert!(chunks.iter().all(|c| c.get("usage").is_none())),
            }
        }
    }

    #[test]
    fn what_the_api_refuses_it_refuses_in_its_own_words() {
        let m = mock();
        let err = |r: Reply| {
            let v: Value = serde_json::from_slice(&r.body()).unwrap();
            (
                r.status,
                v["error"]["message"].as_str().unwrap().to_string(),
                v["error"]["code"].clone(),
            )
        };
        let no_model = json!({"messages": [{"role": "user", "content": "a"}]}).to_string();
        assert_eq!(
            err(chat(&m, &keyed(), no_model.as_bytes())),
            (
                400,
                "you must provide a model parameter".into(),
                Value::Null
            )
        );
        let no_messages = json!({"model": "gpt-4o"}).to_string();
        let (s, msg, code) = err(chat(&m, &keyed(), no_messages.as_bytes()));
        assert_eq!((s, code), (400, json!("missing_required_parameter")));
        assert!(msg.contains("'messages'"));
        let claude = ask(json!({"model": "claude-3"}));
        assert_eq!(err(chat(&m, &keyed(), &claude)).2, json!("model_not_found"));
        assert_eq!(err(chat(&m, &HeaderMap::new(), &ask(json!({})))).0, 401);
        assert_eq!(
            err(chat(&m, &keyed(), &ask(json!({"max_tokens": 0})))).0,
            400
        );
    }
}
