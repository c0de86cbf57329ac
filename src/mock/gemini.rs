//! Google's Gemini API, as the official SDK (`google-genai`) reads it:
//! `POST /v1beta/models/{model}:generateContent` (JSON),
//! `:streamGenerateContent?alt=sse` (`data:` chunks, each a
//! `GenerateContentResponse` with a part of the text; the last with its
//! `finishReason`) — without `alt=sse`, the same chunks as one JSON
//! array — and `:countTokens`; Google's errors in their envelope
//! (`{"error": {"code", "message", "status"}}`): no key (403
//! `PERMISSION_DENIED`), a body that is not JSON or has no `contents`
//! (400 `INVALID_ARGUMENT`), a model not matching `gemini-*` (404
//! `NOT_FOUND`). A framing of its own beside the others: the model is
//! in the path, the stream has no event names and no end marker.

use std::time::Duration;

use hyper::HeaderMap;
use serde_json::{Map, Value, json};

use super::Mock;
use super::reply::{self, Reply, sse};
use super::text::{Answer, Key, TIMING, count_tokens};

/// The API's host.
pub(crate) const HOST: &str = "generativelanguage.googleapis.com";

/// What a path under `/v1beta/models/` (or `/v1/models/`) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Generate,
    Stream,
    CountTokens,
}

/// The model and method of a Gemini path, if it is one.
pub(crate) fn route(path: &str) -> Option<(&str, Method)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    let method = match method {
        "generateContent" => Method::Generate,
        "streamGenerateContent" => Method::Stream,
        "countTokens" => Method::CountTokens,
        _ => return None,
    };
    (!model.is_empty() && !model.contains('/')).then_some((model, method))
}

/// One request: `query` is the path's query (`alt=sse`, `key=…`).
pub(crate) fn answer(
    mock: &Mock,
    (model, method): (&str, Method),
    query: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
    let o = match checked(model, query, headers, body, method) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let prompt = count_tokens(
        o.get("contents")
            .into_iter()
            // Either spelling, as the REST API takes both.
            .chain(o.get("systemInstruction").or(o.get("system_instruction")))
            .chain(o.get("tools")),
    );
    if method == Method::CountTokens {
        return Reply::json(200, &json!({"totalTokens": prompt}), Duration::ZERO);
    }
    let config = o
        .get("generationConfig")
        .or(o.get("generation_config"))
        .cloned()
        .unwrap_or_default();
    let limit = match config
        .get("maxOutputTokens")
        .or_else(|| config.get("max_output_tokens"))
    {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().filter(|n| *n >= 1) {
            Some(n) => Some(n),
            None => {
                return error(
                    400,
                    "generation_config.max_output_tokens: must be a positive integer",
                );
            }
        },
    };
    let mut request = Value::Object(o);
    request["model"] = json!(model);
    let key = Key::of(mock.seed, "gemini", &request);
    let answer = Answer::new(&key, limit);
    let timing = mock.timing.of(model);
    let moments = timing.moments(answer.tokens.len(), &mut key.rng(TIMING));
    let done = moments.last().copied().unwrap_or(timing.ttft);
    let finish = if answer.cut { "MAX_TOKENS" } else { "STOP" };
    let id = reply::id("", 22, reply::BASE62);
    let usage = |n: u64| {
        json!({"promptTokenCount": prompt, "candidatesTokenCount": n,
               "totalTokenCount": prompt + n,
               "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]})
    };
    let chunk = |text: &str, n: u64, finish: Option<&str>| {
        let mut candidate = json!({"content": {"parts": [{"text": text}], "role": "model"},
                                   "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate], "usageMetadata": usage(n),
               "modelVersion": model, "responseId": id})
    };
    match method {
        Method::Generate => Reply::json(
            200,
            &chunk(&answer.text(), answer.len(), Some(finish)),
            done,
        ),
        _ => {
            let last = answer.tokens.len().saturating_sub(1);
            let chunks: Vec<(Duration, Value)> = match answer.tokens.is_empty() {
                true => vec![(done, chunk("", 0, Some(finish)))],
                false => moments
                    .iter()
                    .zip(&answer.tokens)
                    .enumerate()
                    .map(|(i, (t, token))| {
                        let f = (i == last).then_some(finish);
                        (*t, chunk(token, i as u64 + 1, f))
                    })
                    .collect(),
            };
            if query.split('&').any(|kv| kv == "alt=sse") {
                Reply::events(chunks.iter().map(|(t, c)| (*t, sse(None, c))).collect())
            } else {
                // Without alt=sse, the API streams one JSON array.
                let all: Vec<Value> = chunks.into_iter().map(|(_, c)| c).collect();
                Reply::json(200, &Value::Array(all), done)
            }
        }
    }
}

/// Google's error envelope.
pub(crate) fn error(code: u16, message: &str) -> Reply {
    let status = match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        413 => "INVALID_ARGUMENT",
        429 => "RESOURCE_EXHAUSTED",
        _ => "INTERNAL",
    };
    Reply::json(
        code,
        &json!({"error": {"code": code, "message": message, "status": status}}),
        Duration::ZERO,
    )
}

/// The request as the API checks it: a key (header or `key=`), a model it
/// knows, a JSON object with `contents`.
fn checked(
    model: &str,
    query: &str,
    headers: &HeaderMap,
    body: &[u8],
    method: Method,
) -> Result<Map<String, Value>, Reply> {
    let keyed = headers.contains_key("x-goog-api-key")
        || headers.contains_key("authorization")
        || query.split('&').any(|kv| kv.starts_with("key="));
    if !keyed {
        return Err(error(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
        ));
    }
    if !wildmatch::WildMatch::new("gemini-*").matches(model) {
        return Err(error(
            404,
            &format!(
                "models/{model} is not found for API version v1beta, or is not supported for generateContent."
            ),
        ));
    }
    let mut o = reply::object(body)
        .map_err(|e| error(400, &format!("Invalid JSON payload received. {e}")))?;
    // countTokens takes the contents, or a whole request wrapped.
    if method == Method::CountTokens
        && let Some(Value::Object(inner)) = o.get("generateContentRequest").cloned()
    {
        o = inner;
    }
    match o.get("contents") {
        Some(Value::Array(a)) if !a.is_empty() => Ok(o),
        _ => Err(error(
            400,
            "* GenerateContentRequest.contents: contents is not specified",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::timing::Timing;

    fn mock() -> Mock {
        Mock::new(
            vec![crate::mock::Api::Gemini],
            3,
            Timing {
                ttft: Duration::from_millis(10),
                jitter: Duration::ZERO,
                tokens_per_s: 1000.0,
            },
        )
    }

    fn keyed() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-goog-api-key", "k".parse().unwrap());
        h
    }

    const ASK: &[u8] = br#"{"contents": [{"role": "user", "parts": [{"text": "hi there"}]}],
        "generationConfig": {"maxOutputTokens": 4}}"#;

    #[test]
    fn paths_name_the_model_and_the_method() {
        assert_eq!(
            route("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(("gemini-2.5-flash", Method::Stream))
        );
        assert_eq!(
            route("/v1/models/gemini-pro:countTokens"),
            Some(("gemini-pro", Method::CountTokens))
        );
        assert_eq!(route("/v1beta/models/gemini-pro:embedContent"), None);
        assert_eq!(route("/v1beta/models/:generateContent"), None);
        assert_eq!(route("/v1/messages"), None);
    }

    #[test]
    fn a_json_answer_and_a_stream_of_the_same_text() {
        let m = mock();
        let r = answer(
            &m,
            ("gemini-2.5-flash", Method::Generate),
            "",
            &keyed(),
            ASK,
        );
        let v: Value = serde_json::from_slice(&r.body()).unwrap();
        let c = &v["candidates"][0];
        assert_eq!(c["finishReason"], "MAX_TOKENS");
        let text = c["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 4);
        let s = answer(
            &m,
            ("gemini-2.5-flash", Method::Stream),
            "alt=sse",
            &keyed(),
            ASK,
        );
        let body = String::from_utf8(s.body()).unwrap();
        let chunks: Vec<Value> = body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(chunks.len(), 4);
        let streamed: String = chunks
            .iter()
            .map(|c| {
                c["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(streamed, text);
        assert_eq!(chunks[3]["candidates"][0]["finishReason"], "MAX_TOKENS");
        assert!(chunks[0]["candidates"][0].get("finishReason").is_none());
        let arr = answer(&m, ("gemini-2.5-flash", Method::Stream), "", &keyed(), ASK);
        let v: Value = serde_json::from_slice(&arr.body()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 4);
    }

    #[test]
    fn snake_case_fields_and_a_wrapped_count_are_read() {
        let m = mock();
        let snake = br#"{"contents": [{"parts": [{"text": "a b"}]}],
            "generation_config": {"max_output_tokens": 2}}"#;
        let r = answer(
            &m,
            ("gemini-2.5-flash", Method::Generate),
            "",
            &keyed(),
            snake,
        );
        let v: Value = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 2);
        let wrapped = br#"{"generateContentRequest": {"model": "models/gemini-2.5-flash",
            "contents": [{"parts": [{"text": "a b c"}]}]}}"#;
        let n = answer(
            &m,
            ("gemini-2.5-flash", Method::CountTokens),
            "",
            &keyed(),
            wrapped,
        );
        let v: Value = serde_json::from_slice(&n.body()).unwrap();
        assert_eq!(v["totalTokens"], 3);
    }

    #[test]
    fn googles_own_errors() {
        let m = mock();
        let status = |r: Reply| {
            let v: Value = serde_json::from_slice(&r.body()).unwrap();
            (
                v["error"]["code"].as_u64().unwrap(),
                v["error"]["status"].as_str().unwrap().to_string(),
            )
        };
        let generate = ("gemini-2.5-flash", Method::Generate);
        assert_eq!(
            status(answer(&m, generate, "", &HeaderMap::new(), ASK)),
            (403, "PERMISSION_DENIED".into())
        );
        assert_eq!(
            status(answer(
                &m,
                ("gpt-4o", Method::Generate),
                "key=k",
                &HeaderMap::new(),
                ASK
            ))
            .0,
            404
        );
        assert_eq!(
            status(answer(&m, generate, "", &keyed(), b"{}")),
            (400, "INVALID_ARGUMENT".into())
        );
        let n = answer(
            &m,
            ("gemini-2.5-flash", Method::CountTokens),
            "",
            &keyed(),
            ASK,
        );
        let v: Value = serde_json::from_slice(&n.body()).unwrap();
        assert_eq!(v["totalTokens"], 3);
    }
}
