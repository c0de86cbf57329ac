//! The built-in upstream: netchaos answering LLM requests itself, in the
//! providers' wire formats, so that an unmodified client (an official SDK)
//! runs its real parsing with no key, no spend and no network.
//!
//! * [`anthropic`] — Anthropic Messages (JSON and SSE) and token counting;
//! * [`openai`] — OpenAI Chat Completions (JSON and `data:` chunks), and
//!   what OpenAI's APIs share; [`responses`] — OpenAI Responses;
//! * [`gemini`] — Google's Gemini `generateContent` (JSON, and SSE chunks
//!   of a framing of their own);
//! * [`text`] — the deterministic filler answers (seed + request → text)
//!   and token counts; [`timing`] — time to first token and tokens per
//!   second, with jitter;
//! * [`cassette`] — recorded and canned answers (`--record DIR`,
//!   `--mock-from DIR`), matched before any is made up;
//! * [`reply`] — an answer before any socket; [`body`] — its chunks sent
//!   at their moments; [`server`] — the HTTP/1.1 and h2c server
//!   (`netchaos mock`, and the upstream `--mock` puts in a provider's
//!   place); [`stands`] — the hosts it stands in for, their addresses
//!   and where it listens.
//!
//! The per-API modules are pure: a request in, a [`reply::Reply`] with the
//! moments of its bytes out; only the server sleeps.

pub(crate) mod anthropic;
pub(crate) mod body;
pub(crate) mod cassette;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod reply;
pub(crate) mod responses;
pub(crate) mod server;
pub(crate) mod stands;
pub(crate) mod text;
pub(crate) mod timing;
pub(crate) mod tools;

use hyper::HeaderMap;

use reply::Reply;
pub(crate) use timing::{Timing, Timings};

/// An API the mock speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Api {
    /// Anthropic's Messages API (`api.anthropic.com`).
    Anthropic,
    /// OpenAI's Chat Completions and Responses APIs (`api.openai.com`).
    OpenAi,
    /// Google's Gemini API (`generativelanguage.googleapis.com`).
    Gemini,
}

impl Api {
    pub(crate) const ALL: [Api; 3] = [Api::Anthropic, Api::OpenAi, Api::Gemini];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
            Api::Gemini => "gemini",
        }
    }

    /// The provider's API host, which `--mock` answers for.
    pub(crate) fn host(self) -> &'static str {
        match self {
            Api::Anthropic => "api.anthropic.com",
            Api::OpenAi => "api.openai.com",
            Api::Gemini => gemini::HOST,
        }
    }

    pub(crate) fn parse(s: &str) -> Result<Api, String> {
        Api::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("{s:?} is not an API the mock speaks: give anthropic, openai or gemini")
            })
    }

    /// The API whose provider's host `host` (normal: see
    /// [`cassette::normal_host`]) is.
    pub(crate) fn of_host(host: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.host() == host)
    }

    /// The API a path (without its query) belongs to, by its shape:
    /// Anthropic's under `/v1/messages`, Gemini's under `/v1beta/`,
    /// OpenAI's the rest of `/v1/`.
    pub(crate) fn of_path(path: &str) -> Option<Api> {
        if path.starts_with("/v1/messages") {
            Some(Api::Anthropic)
        } else if path.starts_with("/v1beta/") || gemini::route(path).is_some() {
            Some(Api::Gemini)
        } else if path.starts_with("/v1/") {
            Some(Api::OpenAi)
        } else {
            None
        }
    }

    /// A comma-separated list (`anthropic,openai`), each once.
    pub(crate) fn parse_list(s: &str) -> Result<Vec<Api>, String> {
        let mut apis = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let a = Api::parse(part)?;
            if !apis.contains(&a) {
                apis.push(a);
            }
        }
        if apis.is_empty() {
            return Err(
                "no API given: anthropic, openai, gemini, or several (anthropic,openai)".into(),
            );
        }
        Ok(apis)
    }
}

/// The mock: which APIs it answers, its seed and its timing.
#[derive(Debug)]
pub(crate) struct Mock {
    pub(crate) apis: Vec<Api>,
    pub(crate) seed: u64,
    pub(crate) timing: Timings,
    /// Hosts that speak one API only (`--mock`'s, `[[mocks]]`'s): a
    /// request naming one is answered as that API's host answers.
    hosts: Vec<(String, Api)>,
    /// Recorded and canned answers, given first (`--mock-from`).
    cassette: Option<std::sync::Arc<cassette::Cassette>>,
    /// Hosts answered from the cassette only: what it does not hold is
    /// refused, not made up.
    replay_only: Vec<String>,
}

/// One endpoint of a mocked API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Messages,
    CountTokens,
    ChatCompletions,
    Responses,
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        match path {
            "/v1/messages" => Some(Route::Messages),
            "/v1/messages/count_tokens" => Some(Route::CountTokens),
            "/v1/chat/completions" => Some(Route::ChatCompletions),
            "/v1/responses" => Some(Route::Responses),
            _ => None,
        }
    }

    fn api(self) -> Api {
        match self {
            Route::Messages | Route::CountTokens => Api::Anthropic,
            Route::ChatCompletions | Route::Responses => Api::OpenAi,
        }
    }
}

impl Mock {
    pub(crate) fn new(apis: Vec<Api>, seed: u64, timing: impl Into<Timings>) -> Mock {
        Mock {
            apis,
            seed,
            timing: timing.into(),
            hosts: Vec::new(),
            cassette: None,
            replay_only: Vec::new(),
        }
    }

    /// The same, answering from `cassette` first; a request to one of
    /// `replay_only` that it does not hold is refused (a 404 in the API's
    /// shape, marked `x-netchaos-mock: unrecorded`).
    pub(crate) fn with_cassette(
        mut self,
        cassette: std::sync::Arc<cassette::Cassette>,
        replay_only: Vec<String>,
    ) -> Mock {
        self.cassette = Some(cassette);
        self.replay_only = replay_only;
        self
    }

    /// The same, each of `hosts` speaking its own API only.
    pub(crate) fn with_hosts(mut self, hosts: &[(String, Api)]) -> Mock {
        self.hosts = hosts.to_vec();
        self
    }

    /// The APIs a request to `host` may be for.
    fn apis_of(&self, host: Option<&str>) -> &[Api] {
        let host = host.map(cassette::normal_host);
        match self.hosts.iter().find(|(h, _)| Some(h) == host.as_ref()) {
            Some((_, api)) => std::slice::from_ref(api),
            None => &self.apis,
        }
    }

    /// The answer to one request (its `host` as the client named it).
    pub(crate) fn reply(
        &self,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Reply {
        if let Some(c) = &self.cassette {
            if let Some(r) = c.answer(method, host, path, body) {
                return r;
            }
            let only = host.is_some_and(|h| self.replay_only.contains(&cassette::normal_host(h)));
            if only || self.apis.is_empty() {
                static TOLD: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                let why = format!(
                    "netchaos mock: nothing in {} matches {method} {}{path}",
                    c.dirs,
                    host.unwrap_or("")
                );
                match TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    false => tracing::warn!("{why} (answered 404; later ones are logged with -v)"),
                    true => tracing::debug!("{why}"),
                }
                return self
                    .refuse(host, path, 404, &why)
                    .header("x-netchaos-mock", "unrecorded");
            }
        }
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        if let Some(g) = gemini::route(path).filter(|_| self.apis_of(host).contains(&Api::Gemini)) {
            if method != "POST" {
                let why = format!("Method Not Allowed: {method} {path}");
                return self.refuse(host, path, 405, &why);
            }
            return gemini::answer(self, g, query, headers, body);
        }
        let route = Route::of(path).filter(|r| self.apis_of(host).contains(&r.api()));
        let Some(route) = route else {
            return self.refuse(host, path, 404, &format!("Not Found: {method} {path}"));
        };
        if method != "POST" {
            return self.refuse(
                host,
                path,
                405,
                &format!("Method Not Allowed: {method} {path}"),
            );
        }
        match route {
            Route::Messages => anthropic::messages(self, headers, body),
            Route::CountTokens => anthropic::count(headers, body),
            Route::ChatCompletions => openai::chat(self, headers, body),
            Route::Responses => responses::create(self, headers, body),
        }
    }

    /// Which of its APIs a request to `host` for `path` is for: the one,
    /// or the one whose host or paths it names (Anthropic's paths are
    /// under `/v1/messages`), else the first.
    fn api_for(&self, host: Option<&str>, path: &str) -> Api {
        let path = path.split('?').next().unwrap_or(path);
        if let [one] = self.apis_of(host) {
            return *one;
        }
        let named = host
            .and_then(|h| Api::of_host(&cassette::normal_host(h)))
            .or_else(|| Api::of_path(path));
        named
            .filter(|a| self.apis.contains(a))
            .unwrap_or_else(|| self.apis.first().copied().unwrap_or(Api::OpenAi))
    }

    /// An error in the shape of the API a request was for: an unknown
    /// path (404), a method it does not take (405), a body too large
    /// (413).
    pub(crate) fn refuse(
        &self,
        host: Option<&str>,
        path: &str,
        status: u16,
        message: &str,
    ) -> Reply {
        match self.api_for(host, path) {
            Api::Anthropic => {
                let kind = match status {
                    404 => "not_found_error",
                    413 => "request_too_large",
                    _ => "invalid_request_error",
                };
                anthropic::error(status, kind, message)
            }
            Api::OpenAi => openai::error(status, message, None, None),
            Api::Gemini => gemini::error(status, message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apis_are_listed_by_name() {
        assert_eq!(
            Api::parse_list("anthropic, OpenAI,anthropic").unwrap(),
            [Api::Anthropic, Api::OpenAi]
        );
        assert_eq!(Api::parse_list("gemini").unwrap(), [Api::Gemini]);
        assert!(Api::parse_list("mistral").unwrap_err().contains("gemini"));
        assert!(Api::parse_list(",").is_err());
    }

    #[test]
    fn requests_are_routed_by_path_within_the_apis_served() {
        let both = Mock::new(Api::ALL.to_vec(), 1, Timing::default());
        let only = Mock::new(vec![Api::OpenAi], 1, Timing::default());
        let h = HeaderMap::new();
        // No key: each API's own 401 says which route answered.
        let r = both.reply("POST", "/v1/messages?beta=true", None, &h, b"{}");
        assert_eq!(r.status, 401);
        assert!(r.headers.iter().any(|(n, _)| *n == "request-id"));
        let r = both.reply("POST", "/v1/chat/completions", None, &h, b"{}");
        assert!(r.headers.iter().any(|(n, _)| *n == "x-request-id"));
        let r = only.reply("POST", "/v1/messages", None, &h, b"{}");
        assert_eq!(r.status, 404);
        assert!(r.headers.iter().any(|(n, _)| *n == "x-request-id"));
        let r = both.reply("GET", "/v1/models", Some("api.anthropic.com"), &h, b"");
        assert_eq!(r.status, 404);
        assert!(r.headers.iter().any(|(n, _)| *n == "request-id"));
        assert_eq!(
            both.reply("GET", "/v1/responses", None, &h, b"").status,
            405
        );
        // A host mocked as one API answers that API's paths only.
        let hosts = Mock::new(Api::ALL.to_vec(), 1, Timing::default())
            .with_hosts(&[("llm.internal".into(), Api::OpenAi)]);
        let r = hosts.reply("POST", "/v1/messages", Some("LLM.internal:443"), &h, b"{}");
        assert_eq!(r.status, 404);
        assert!(r.headers.iter().any(|(n, _)| *n == "x-request-id"));
        let r = hosts.reply("POST", "/v1/messages", Some("other"), &h, b"{}");
        assert_eq!(r.status, 401);
    }
}
