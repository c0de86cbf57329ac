//! The mock's answers: filler text derived from the seed and the request,
//! so that the same seed and the same request give the same answer (a run
//! replays), and a request for fewer tokens gets a prefix of it.
//!
//! There is no model: a "token" is one word of filler (with its leading
//! space and any punctuation), and a prompt's token count is its number
//! of words. Both are close enough for budgets and timing, and documented
//! as not the providers' tokenizers.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

/// The fields of a request that do not change what it asks for, only how
/// much of the answer and in what framing: left out of its key.
const NOT_THE_QUESTION: &[&str] = &[
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
];

/// A natural answer's length in tokens: drawn in this range, then run on
/// to the end of its sentence.
const NATURAL: std::ops::RangeInclusive<usize> = 24..=96;

/// The words answers are made of.
const WORDS: &[&str] = &[
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "enim",
    "ad",
    "minim",
    "veniam",
    "quis",
    "nostrud",
    "exercitation",
    "ullamco",
    "laboris",
    "nisi",
    "aliquip",
    "ex",
    "ea",
    "commodo",
    "consequat",
    "duis",
    "aute",
    "irure",
    "in",
    "reprehenderit",
    "voluptate",
    "velit",
    "esse",
    "cillum",
    "fugiat",
    "nulla",
    "pariatur",
    "excepteur",
    "sint",
    "occaecat",
    "cupidatat",
    "non",
    "proident",
    "sunt",
    "culpa",
    "qui",
    "officia",
    "deserunt",
    "mollit",
    "anim",
    "id",
    "est",
    "laborum",
];

/// What identifies a request's answer: a digest of the seed, the API and
/// the request with [`NOT_THE_QUESTION`] left out (its other fields as the
/// client ordered them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key([u8; 32]);

impl Key {
    pub(crate) fn of(seed: u64, api: &str, request: &Value) -> Key {
        let mut question = request.clone();
        if let Some(o) = question.as_object_mut() {
            for k in NOT_THE_QUESTION {
                o.remove(*k);
            }
        }
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(&seed.to_le_bytes());
        ctx.update(api.as_bytes());
        ctx.update(&[0]);
        ctx.update(question.to_string().as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(ctx.finish().as_ref());
        Key(key)
    }

    /// A generator for one purpose (`stream`: text, timing, …) of this
    /// answer: each purpose draws apart, so one never shifts another.
    pub(crate) fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut r = ChaCha8Rng::from_seed(self.0);
        r.set_stream(stream);
        r
    }
}

/// The draws of the answer's text.
pub(crate) const TEXT: u64 = 1;
/// The draws of its timing.
pub(crate) const TIMING: u64 = 2;

/// One answer: its tokens (concatenated, its text) and whether it was cut
/// short by the request's limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) tokens: Vec<String>,
    pub(crate) cut: bool,
}

impl Answer {
    /// The answer to the request `key`, at most `limit` tokens.
    pub(crate) fn new(key: &Key, limit: Option<u64>) -> Answer {
        let mut rng = key.rng(TEXT);
        let target = rng.random_range(NATURAL);
        let mut tokens: Vec<String> = Vec::with_capacity(target + 16);
        // Sentences of 5-14 words until the target is reached.
        while tokens.len() < target {
            let len = rng.random_range(5..=14);
            for i in 0..len {
                let w = WORDS[rng.random_range(0..WORDS.len())];
                let mut t = String::with_capacity(w.len() + 2);
                if !tokens.is_empty() {
                    t.push(' ');
                }
                if i == 0 {
                    let mut c = w.chars();
                    if let Some(first) = c.next() {
                        t.extend(first.to_uppercase());
                        t.push_str(c.as_str());
                    }
                } else {
                    t.push_str(w);
                }
                if i + 1 == len {
                    t.push('.');
                } else if i > 2 && i + 3 < len && rng.random_ratio(1, 8) {
                    t.push(',');
                }
                tokens.push(t);
            }
        }
        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let cut = tokens.len() > limit;
        tokens.truncate(limit);
        Answer { tokens, cut }
    }

    pub(crate) fn text(&self) -> String {
        self.tokens.concat()
    }

    /// Its first `n` tokens only, whole: the words before a tool call.
    pub(crate) fn preamble(&mut self, n: usize) {
        if self.tokens.len() > n {
            self.tokens.truncate(n);
            self.cut = false;
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.tokens.len() as u64
    }
}

/// A prompt's tokens, as the mock counts them: the words of every string
/// in `parts` (texts, tool definitions, anything the client sent there),
/// at least one.
pub(crate) fn count_tokens<'a>(parts: impl IntoIterator<Item = &'a Value>) -> u64 {
    fn words(v: &Value) -> u64 {
        match v {
            Value::String(s) => s.split_whitespace().count() as u64,
            Value::Array(a) => a.iter().map(words).sum(),
            Value::Object(o) => o.values().map(words).sum(),
            _ => 0,
        }
    }
    parts.into_iter().map(words).sum::<u64>().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(text: &str) -> Value {
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": text}]})
    }

    #[test]
    fn the_same_seed_and_request_give_the_same_answer() {
        let a = Answer::new(&Key::of(7, "anthropic", &req("hi")), None);
        assert_eq!(a, Answer::new(&Key::of(7, "anthropic", &req("hi")), None));
        assert_ne!(a, Answer::new(&Key::of(8, "anthropic", &req("hi")), None));
        assert_ne!(a, Answer::new(&Key::of(7, "anthropic", &req("ho")), None));
        assert_ne!(a, Answer::new(&Key::of(7, "openai", &req("hi")), None));
        assert!(!a.cut && NATURAL.contains(&a.tokens.len()) || a.tokens.len() > 96);
        assert!(a.text().ends_with('.'), "{}", a.text());
        assert!(a.text().starts_with(char::is_uppercase));
        assert_eq!(a.text().split_whitespace().count(), a.tokens.len());
    }

    /// The limit and the framing are not part of the question: a shorter
    /// answer is a prefix of the longer one.
    #[test]
    fn a_limit_cuts_the_same_answer() {
        let long = Answer::new(&Key::of(1, "openai", &req("x")), None);
        let mut asked = req("x");
        asked["max_tokens"] = json!(5);
        asked["stream"] = json!(true);
        let short = Answer::new(&Key::of(1, "openai", &asked), Some(5));
        assert!(short.cut);
        assert_eq!(short.tokens, long.tokens[..5]);
        let all = Answer::new(&Key::of(1, "openai", &req("x")), Some(10_000));
        assert!(!all.cut);
        assert_eq!(all, long);
    }

    #[test]
    fn prompts_are_counted_in_words() {
        let m = json!([{"role": "user", "content": [{"type": "text", "text": "one two  three"}]}]);
        assert_eq!(count_tokens([&m, &json!("four five")]), 7);
        assert_eq!(count_tokens([&json!([])]), 1);
    }
}
