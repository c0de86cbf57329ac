//! OpenAI's Responses API: `POST /v1/responses`, a `response` object, or
//! its event stream (`response.created` … `response.output_text.delta` …
//! `response.completed`, or `response.incomplete` when
//! `max_output_tokens` cut the answer), each event numbered
//! (`sequence_number`). Errors, headers and models are Chat Completions'
//! ([`super::openai`]).

use std::time::Duration;

use hyper::HeaderMap;
use serde_json::{Value, json};

use super::Mock;
use super::openai;
use super::reply::{self, Reply, sse};
use super::text::{Answer, Key, TIMING, count_tokens};

/// The least `max_output_tokens` the API takes.
const MIN_OUTPUT_TOKENS: u64 = 16;

/// `POST /v1/responses`.
pub(crate) fn create(mock: &Mock, headers: &HeaderMap, body: &[u8]) -> Reply {
    let o = match openai::checked(headers, body, "") {
        Ok(o) => o,
        Err(r) => return r,
    };
    let limit = match openai::limit(&o, &["max_output_tokens"]) {
        Ok(Some(n)) if n < MIN_OUTPUT_TOKENS => {
            return openai::error(
                400,
                &format!(
                    "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= {MIN_OUTPUT_TOKENS}, but got {n} instead."
                ),
                Some("max_output_tokens"),
                Some("integer_below_min_value"),
            );
        }
        Ok(l) => l,
        Err(r) => return r,
    };
    let input = count_tokens(
        ["input", "instructions", "tools"]
            .iter()
            .filter_map(|k| o.get(*k)),
    );
    let streams = reply::streams(&o);
    let request = Value::Object(o);
    let key = Key::of(mock.seed, "openai-responses", &request);
    let answer = Answer::new(&key, limit);
    let timing = mock
        .timing
        .of(request["model"].as_str().unwrap_or_default());
    let moments = timing.moments(answer.tokens.len(), &mut key.rng(TIMING));
    let done = moments.last().copied().unwrap_or(timing.ttft);
    let (status, incomplete) = match answer.cut {
        true => ("incomplete", json!({"reason": "max_output_tokens"})),
        false => ("completed", Value::Null),
    };
    let msg_id = reply::id("msg_", 48, reply::HEX);
    let text = json!({"type": "output_text", "text": answer.text(), "annotations": [],
                      "logprobs": []});
    let item = json!({"type": "message", "id": msg_id, "status": status,
                      "role": "assistant", "content": [text]});
    let usage = json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": answer.len(),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + answer.len(),
    });
    let field = |k: &str, default: Value| request.get(k).cloned().unwrap_or(default);
    let response = json!({
        "id": reply::id("resp_", 48, reply::HEX),
        "object": "response",
        "created_at": reply::unix_now(),
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": field("instructions", Value::Null),
        "max_output_tokens": field("max_output_tokens", Value::Null),
        "model": request["model"],
        "output": [item],
        "parallel_tool_calls": field("parallel_tool_calls", json!(true)),
        "previous_response_id": field("previous_response_id", Value::Null),
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": field("store", json!(true)),
        "temperature": field("temperature", json!(1.0)),
        "text": {"format": {"type": "text"}},
        "tool_choice": field("tool_choice", json!("auto")),
        "tools": field("tools", json!([])),
        "top_p": field("top_p", json!(1.0)),
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": field("metadata", json!({})),
    });
    let r = if streams {
        let started = {
            let mut r = response.clone();
            r["status"] = json!("in_progress");
            r["incomplete_details"] = Value::Null;
            r["output"] = json!([]);
            r["usage"] = Value::Null;
            r
        };
        let at = |mut v: Value| {
            v["item_id"] = json!(msg_id);
            v["output_index"] = json!(0);
            v["content_index"] = json!(0);
            v
        };
        let mut item_started = item.clone();
        item_started["status"] = json!("in_progress");
        item_started["content"] = json!([]);
        let mut part_started = text.clone();
        part_started["text"] = json!("");
        let mut events: Vec<(Duration, Value)> = vec![
            (
                Duration::ZERO,
                json!({"type": "response.created", "response": started}),
            ),
            (
                Duration::ZERO,
                json!({"type": "response.in_progress", "response": started}),
            ),
            (
                Duration::ZERO,
                json!({"type": "response.output_item.added", "output_index": 0,
                       "item": item_started}),
            ),
            (
                Duration::ZERO,
                at(json!({"type": "response.content_part.added", "part": part_started})),
            ),
        ];
        for (t, token) in moments.iter().zip(&answer.tokens) {
            events.push((
                *t,
                at(json!({"type": "response.output_text.delta", "delta": token,
                          "logprobs": []})),
            ));
        }
        let end = if answer.cut {
            "response.incomplete"
        } else {
            "response.completed"
        };
        for e in [
            at(
                json!({"type": "response.output_text.done", "text": answer.text(),
                      "logprobs": []}),
            ),
            at(json!({"type": "response.content_part.done", "part": text})),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": end, "response": response}),
        ] {
            events.push((done, e));
        }
        Reply::events(
            events
                .into_iter()
                .enumerate()
                .map(|(n, (t, mut e))| {
                    e["sequence_number"] = json!(n);
                    let name = e["type"].as_str().unwrap_or_default().to_string();
                    (t, sse(Some(&name), &e))
                })
                .collect(),
        )
    } else {
        Reply::json(200, &response, done)
    };
    openai::with_headers(r, done, input + limit.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::timing::Timing;

    fn mock() -> Mock {
        Mock::new(
            vec![crate::mock::Api::OpenAi],
            9,
            Timing {
                ttft: Duration::ZERO,
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

    #[test]
    fn a_cut_answer_is_incomplete_in_json_and_stream() {
        let ask = |stream: bool| {
            json!({"model": "gpt-4.1", "input": "Tell me", "max_output_tokens": 16,
                   "stream": stream})
            .to_string()
        };
        let r = create(&mock(), &keyed(), ask(false).as_bytes());
        let v: Value = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(v["status"], "incomplete");
        assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(v["usage"]["output_tokens"], 16);
        let text = v["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        let r = create(&mock(), &keyed(), ask(true).as_bytes());
        let body = String::from_utf8(r.body()).unwrap();
        let events: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        for (n, e) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], n);
        }
        assert_eq!(events[0]["type"], "response.created");
        assert_eq!(events.last().unwrap()["type"], "response.incomplete");
        let streamed: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, text);
    }

    #[test]
    fn the_api_refuses_a_limit_below_its_minimum() {
        let body = json!({"model": "gpt-4.1", "input": "x", "max_output_tokens": 8}).to_string();
        let r = create(&mock(), &keyed(), body.as_bytes());
        assert_eq!(r.status, 400);
        let body = json!({"input": "x"}).to_string();
        assert_eq!(create(&mock(), &keyed(), body.as_bytes()).status, 400);
    }
}
