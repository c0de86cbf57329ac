//! Settings as they are written, and their reading: a located value tree
//! and a reader that turns it into typed settings. A leaf of the crate:
//! profiles, `--fault` flags, API bodies and `[netem]` tables all arrive
//! here, and nothing here knows what they mean.
//!
//! Profiles (TOML), `--fault` strings and API bodies (JSON) all arrive here as
//! [`Node`]s that remember where each value was written. [`Fields`] reads a
//! table key by key with the human units, and reports every mistake — a wrong
//! type, a bad unit, an unknown key — as a [`ProfileError`] naming the place,
//! the key path and the expected form.

use std::fmt;
use std::time::Duration;

pub mod files;

use crate::units;
use files::FilePolicy;

/// A mistake in a profile, a `--fault` string or an API body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{loc}: {message}")]
pub struct ProfileError {
    /// `file:line:column`, or the flag or request the value came from.
    pub loc: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl ProfileError {
    pub fn new(loc: impl Into<String>, message: impl Into<String>) -> Self {
        ProfileError {
            loc: loc.into(),
            message: message.into(),
        }
    }
}

/// A value with the place it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub loc: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Node>),
    /// Key, the key's own location, and the value.
    Table(Vec<(String, String, Node)>),
    /// A TOML date or time: never valid here, kept to say so.
    Other(&'static str),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "a string",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Bool(_) => "a boolean",
            Value::Array(_) => "an array",
            Value::Table(_) => "a table",
            Value::Other(t) => t,
        }
    }
}

impl fmt::Display for Value {
    /// The value as the user wrote it, for "got …" in messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            other => f.write_str(other.type_name()),
        }
    }
}

/// Converts byte offsets into `file:line:column`.
pub struct SourceMap<'a> {
    name: &'a str,
    line_starts: Vec<usize>,
    text: &'a str,
}

impl<'a> SourceMap<'a> {
    pub fn new(name: &'a str, text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceMap {
            name,
            line_starts,
            text,
        }
    }

    pub fn loc(&self, offset: usize) -> String {
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let col = self.text[start..offset.min(self.text.len())]
            .chars()
            .count()
            + 1;
        format!("{}:{}:{}", self.name, line, col)
    }
}

/// Parses TOML text into a located tree.
pub fn parse_toml(name: &str, text: &str) -> Result<Node, ProfileError> {
    use toml::de::DeTable;
    let map = SourceMap::new(name, text);
    let doc = DeTable::parse(text).map_err(|e| {
        let at = e
            .span()
            .map_or_else(|| name.to_string(), |s| map.loc(s.start));
        ProfileError::new(at, format!("invalid TOML: {}", e.message().trim()))
    })?;
    let span = doc.span();
    Ok(table_node(&map, doc.get_ref(), span.start))
}

fn table_node(map: &SourceMap<'_>, t: &toml::de::DeTable<'_>, at: usize) -> Node {
    let entries = t
        .iter()
        .map(|(k, v)| {
            (
                k.get_ref().to_string(),
                map.loc(k.span().start),
                value_node(map, v),
            )
        })
        .collect();
    Node {
        value: Value::Table(entries),
        loc: map.loc(at),
    }
}

fn value_node(map: &SourceMap<'_>, v: &toml::Spanned<toml::de::DeValue<'_>>) -> Node {
    use toml::de::DeValue;
    let loc = map.loc(v.span().start);
    let value = match v.get_ref() {
        DeValue::String(s) => Value::Str(s.to_string()),
        DeValue::Integer(i) => match i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()) {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Other("an integer too large"),
        },
        DeValue::Float(x) => match x.as_str().replace('_', "").parse::<f64>() {
            Ok(n) => Value::Float(n),
            Err(_) => Value::Other("an unreadable number"),
        },
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(_) => Value::Other("a date or time"),
        DeValue::Array(a) => Value::Array(a.iter().map(|e| value_node(map, e)).collect()),
        DeValue::Table(t) => return table_node(map, t, v.span().start),
    };
    Node { value, loc }
}

/// Converts JSON (an API request body) into a located tree; every value is
/// located at `loc` plus its path.
pub fn from_json(v: &serde_json::Value, loc: &str) -> Node {
    use serde_json::Value as J;
    let value = match v {
        J::String(s) => Value::Str(s.clone()),
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| from_json(x, &format!("{loc}[{i}]")))
                .collect(),
        ),
        J::Object(m) => Value::Table(
            m.iter()
                .map(|(k, x)| {
                    let at = format!("{loc}.{k}");
                    (k.clone(), at.clone(), from_json(x, &at))
                })
                .collect(),
        ),
        J::Null => Value::Other("null"),
    };
    Node {
        value,
        loc: loc.to_string(),
    }
}

/// A tree back as JSON (a value given as data: a JSON merge patch in a
/// profile's table or an API body); `None` for what JSON cannot hold (a
/// TOML date).
pub fn to_json(node: &Node) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    Some(match &node.value {
        Value::Str(s) => J::String(s.clone()),
        Value::Int(i) => J::from(*i),
        // (serde_json would make a NaN or an infinity null.)
        Value::Float(f) if !f.is_finite() => return None,
        Value::Float(f) => J::from(*f),
        Value::Bool(b) => J::Bool(*b),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect::<Option<_>>()?),
        Value::Table(entries) => J::Object(
            entries
                .iter()
                .map(|(k, _, n)| Some((k.clone(), to_json(n)?)))
                .collect::<Option<_>>()?,
        ),
        Value::Other("null") => J::Null,
        Value::Other(_) => return None,
    })
}

/// Reads the keys of one table, remembering which were read so that
/// [`Fields::finish`] can reject the rest as unknown.
pub struct Fields {
    /// Dotted prefix for messages: `bandwidth`, `rules[0].match`.
    path: String,
    loc: String,
    entries: Vec<(String, String, Node)>,
    known: Vec<&'static str>,
    /// Where files named in this table may be read from.
    files: FilePolicy,
}

impl Fields {
    /// Starts reading `node`, which must be a table.
    pub fn new(path: impl Into<String>, node: Node) -> Result<Fields, ProfileError> {
        let path = path.into();
        match node.value {
            Value::Table(entries) => Ok(Fields {
                path,
                loc: node.loc,
                entries,
                known: Vec::new(),
                files: FilePolicy::default(),
            }),
            other => Err(ProfileError::new(
                node.loc,
                format!("{path}: expected a table, got {}", other.type_name()),
            )),
        }
    }

    /// A table built from `key=value` strings (`--fault`), located at `loc`.
    pub fn from_pairs(path: &str, loc: &str, pairs: Vec<(String, String)>) -> Fields {
        let entries = pairs
            .into_iter()
            .map(|(k, v)| {
                let node = Node {
                    value: Value::Str(v),
                    loc: loc.to_string(),
                };
                (k, loc.to_string(), node)
            })
            .collect();
        Fields {
            path: path.to_string(),
            loc: loc.to_string(),
            entries,
            known: Vec::new(),
            files: FilePolicy::Anywhere { base: None },
        }
    }

    pub fn loc(&self) -> &str {
        &self.loc
    }

    /// Sets where files named in this table may be read from.
    pub fn with_files(mut self, files: FilePolicy) -> Fields {
        self.files = files;
        self
    }

    /// The contents of the file named by `key` (read under the table's
    /// [`FilePolicy`]), and how to show its name.
    pub fn file(&mut self, key: &'static str) -> Result<Option<(Vec<u8>, String)>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        let Value::Str(path) = &node.value else {
            return Err(self.expected(key, &node, "a file path"));
        };
        self.files
            .read(path)
            .map(Some)
            .map_err(|e| self.error(key, &node.loc, e))
    }

    /// The same table, reported under another path (a fault's type name).
    pub fn renamed(mut self, path: &str) -> Fields {
        self.path = path.to_string();
        self
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the key is present (and marks it known).
    pub fn has(&mut self, key: &'static str) -> bool {
        self.known.push(key);
        self.entries.iter().any(|(k, _, _)| k == key)
    }

    /// Whether `key` holds a table (without reading it).
    pub fn is_table(&self, key: &str) -> bool {
        self.entries
            .iter()
            .any(|(k, _, n)| k == key && matches!(n.value, Value::Table(_)))
    }

    /// Removes and returns the raw node for `key`.
    pub fn take(&mut self, key: &'static str) -> Option<Node> {
        self.known.push(key);
        let i = self.entries.iter().position(|(k, _, _)| k == key)?;
        Some(self.entries.remove(i).2)
    }

    /// Removes and returns every `PREFIX.REST` key as `(REST, node)` (a
    /// `--fault` flag or an API body spelling a nested table with dotted
    /// keys, like `body.model`).
    pub fn take_prefixed(&mut self, prefix: &'static str) -> Vec<(String, Node)> {
        self.known.push(prefix);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            match self.entries[i].0.strip_prefix(prefix) {
                Some(rest) if rest.starts_with('.') && rest.len() > 1 => {
                    let rest = rest[1..].to_string();
                    let (_, _, node) = self.entries.remove(i);
                    out.push((rest, node));
                }
                _ => i += 1,
            }
        }
        out
    }

    /// An error about `key` at `node`'s place.
    pub fn error(&self, key: &str, loc: &str, message: impl fmt::Display) -> ProfileError {
        ProfileError::new(loc, format!("{}.{key}: {message}", self.path))
    }

    /// An error about this table as a whole.
    pub fn table_error(&self, message: impl fmt::Display) -> ProfileError {
        let message = message.to_string();
        // `missing "delay"` beside an unknown `dealy`: say which key it
        // probably is (that key is only rejected after this error).
        let hint = message
            .strip_prefix("missing \"")
            .and_then(|rest| rest.split('"').next())
            .and_then(|want| {
                self.entries
                    .iter()
                    .find(|(k, _, _)| {
                        !self.known.contains(&k.as_str()) && closest(k, &[want]).is_some()
                    })
                    .map(|(k, loc, _)| (k.clone(), loc.clone(), want.to_string()))
            });
        match hint {
            Some((given, loc, want)) => ProfileError::new(
                &loc,
                format!(
                    "{}: {message}; {given:?} is given: did you mean {want:?}?",
                    self.path
                ),
            ),
            None => ProfileError::new(&self.loc, format!("{}: {message}", self.path)),
        }
    }

    fn expected(&self, key: &str, node: &Node, form: &str) -> ProfileError {
        self.error(
            key,
            &node.loc,
            format!("expected {form}, got {}", node.value),
        )
    }

    /// Reads a string-like value through `parse`; numbers are accepted where
    /// `parse` accepts their text (so `--fault` strings and TOML agree).
    pub fn with_text<T>(
        &mut self,
        key: &'static str,
        form: &str,
        parse: impl Fn(&str) -> Result<T, &'static str>,
    ) -> Result<Option<T>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            Value::Float(x) => x.to_string(),
            _ => return Err(self.expected(key, &node, form)),
        };
        parse(&text).map(Some).map_err(|e| {
            // The parser's phrase is more specific than `form` when it differs.
            self.expected(key, &node, if e.is_empty() { form } else { e })
        })
    }

    pub fn string(&mut self, key: &'static str) -> Result<Option<String>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        match node.value {
            Value::Str(s) => Ok(Some(s)),
            _ => Err(self.expected(key, &node, "a string")),
        }
    }

    pub fn duration(&mut self, key: &'static str) -> Result<Option<Duration>, ProfileError> {
        self.with_text(key, units::DURATION_FORM, units::parse_duration)
    }

    /// A duration, or `"forever"` (returned as `Some(None)`).
    pub fn duration_or_forever(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Option<Duration>>, ProfileError> {
        const FORM: &str = "a duration like \"5s\" or \"forever\"";
        self.with_text(key, FORM, |s| {
            if s.trim() == "forever" {
                Ok(None)
            } else {
                units::parse_duration(s).map(Some).map_err(|_| FORM)
            }
        })
    }

    pub fn rate(&mut self, key: &'static str) -> Result<Option<u64>, ProfileError> {
        self.with_text(key, units::RATE_FORM, units::parse_rate)
    }

    pub fn size(&mut self, key: &'static str) -> Result<Option<u64>, ProfileError> {
        self.with_text(key, units::SIZE_FORM, units::parse_size)
    }

    pub fn percent(&mut self, key: &'static str) -> Result<Option<f64>, ProfileError> {
        self.with_text(key, "", units::parse_percent)
    }

    pub fn window(&mut self, key: &'static str) -> Result<Option<units::Window>, ProfileError> {
        self.with_text(key, units::WINDOW_FORM, units::Window::parse)
    }

    /// A number in `lo..=hi`.
    pub fn number_in(
        &mut self,
        key: &'static str,
        lo: f64,
        hi: f64,
    ) -> Result<Option<f64>, ProfileError> {
        let form = format!("a number from {lo} to {hi}");
        self.with_text(key, &form, |s| {
            let x: f64 = s.trim().parse().map_err(|_| "")?;
            if (lo..=hi).contains(&x) {
                Ok(x)
            } else {
                Err("")
            }
        })
    }

    /// A whole number in `lo..=hi`.
    pub fn integer_in(
        &mut self,
        key: &'static str,
        lo: u64,
        hi: u64,
    ) -> Result<Option<u64>, ProfileError> {
        let form = format!("a whole number from {lo} to {hi}");
        self.with_text(key, &form, |s| {
            let x: u64 = s.trim().parse().map_err(|_| "")?;
            if (lo..=hi).contains(&x) {
                Ok(x)
            } else {
                Err("")
            }
        })
    }

    pub fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        match &node.value {
            Value::Bool(b) => Ok(Some(*b)),
            Value::Str(s) if matches!(s.trim(), "true" | "yes" | "1") => Ok(Some(true)),
            Value::Str(s) if matches!(s.trim(), "false" | "no" | "0") => Ok(Some(false)),
            _ => Err(self.expected(key, &node, "true or false")),
        }
    }

    /// One of the listed words.
    pub fn choice(
        &mut self,
        key: &'static str,
        choices: &[&'static str],
    ) -> Result<Option<&'static str>, ProfileError> {
        let form = format!("one of {}", quoted_list(choices));
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        match &node.value {
            Value::Str(s) => match choices.iter().find(|c| **c == s.trim()) {
                Some(c) => Ok(Some(c)),
                None => Err(self.expected(key, &node, &form)),
            },
            _ => Err(self.expected(key, &node, &form)),
        }
    }

    /// An array of strings; a single string is taken as a one-element array.
    pub fn strings(&mut self, key: &'static str) -> Result<Option<Vec<Node>>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(None);
        };
        let items = match node.value {
            Value::Array(items) => items,
            Value::Str(_) | Value::Int(_) => vec![node],
            _ => return Err(self.expected(key, &node, "a string or an array of strings")),
        };
        for item in &items {
            if !matches!(item.value, Value::Str(_) | Value::Int(_)) {
                return Err(self.expected(key, item, "a string"));
            }
        }
        Ok(Some(items))
    }

    /// A list given as an array, or as one string of words apart by `|`
    /// or spaces (what `--fault` gives): each word, with where it stands.
    pub fn words(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Vec<(String, String)>>, ProfileError> {
        self.split_list(key, &['|', ' '], false)
    }

    /// A list given as an array, or as one string of alternatives apart by
    /// `|` only (a value with a space stays whole, for its parser to refuse;
    /// an empty alternative is kept, for the same reason).
    pub fn alternatives(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Vec<(String, String)>>, ProfileError> {
        self.split_list(key, &['|'], true)
    }

    fn split_list(
        &mut self,
        key: &'static str,
        seps: &[char],
        keep_empty: bool,
    ) -> Result<Option<Vec<(String, String)>>, ProfileError> {
        Ok(self.strings(key)?.map(|nodes| {
            nodes
                .iter()
                .flat_map(|n| {
                    node_text(n)
                        .split(seps)
                        .filter(|w| keep_empty || !w.is_empty())
                        .map(|w| (w.to_string(), n.loc.clone()))
                        .collect::<Vec<_>>()
                })
                .collect()
        }))
    }

    /// An array of tables (`[[rules]]`).
    pub fn tables(&mut self, key: &'static str) -> Result<Vec<Node>, ProfileError> {
        let Some(node) = self.take(key) else {
            return Ok(Vec::new());
        };
        match node.value {
            Value::Array(items) => Ok(items),
            _ => Err(self.expected(key, &node, "an array of tables, like [[rules]]")),
        }
    }

    /// Rejects any key that no reader asked for.
    pub fn finish(self) -> Result<(), ProfileError> {
        if let Some((key, loc, _)) = self.entries.first() {
            if self.known.contains(&key.as_str()) {
                return Err(ProfileError::new(
                    loc,
                    format!("{}: {key:?} is given twice; give it once", self.path),
                ));
            }
            let mut known = self.known.clone();
            known.sort_unstable();
            known.dedup();
            let hint = match closest(key, &known) {
                Some(k) => format!(" (did you mean {k:?}?)"),
                None => String::new(),
            };
            return Err(ProfileError::new(
                loc,
                format!(
                    "{}: unknown key {key:?}{hint}; expected one of: {}",
                    self.path,
                    known.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// The text of a string node (or an integer's digits).
pub fn node_text(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `"a", "b" or "c"`.
pub fn quoted_list(items: &[&str]) -> String {
    let q: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    match q.len() {
        0 => String::new(),
        1 => q[0].clone(),
        n => format!("{} or {}", q[..n - 1].join(", "), q[n - 1]),
    }
}

/// The known word nearest to a misspelt one, if it is close.
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::levenshtein(word, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Fields {
        Fields::new("t", parse_toml("x.toml", text).unwrap()).unwrap()
    }

    #[test]
    fn a_missing_key_beside_a_misspelt_one_names_it() {
        let f = fields("dealy = \"100ms\"\n");
        let e = f.table_error("missing \"delay\" (a duration like \"100ms\")");
        assert!(
            e.message
                .contains("\"dealy\" is given: did you mean \"delay\"?"),
            "{e}"
        );
        let e = f.table_error("missing \"rate\"");
        assert!(!e.message.contains("did you mean"), "{e}");
    }

    #[test]
    fn locations_point_at_the_value() {
        let mut f = fields("a = 1\nrate = \"fast\"\n");
        f.take("a");
        let e = f.rate("rate").unwrap_err();
        assert_eq!(e.loc, "x.toml:2:8");
        assert_eq!(
            e.message,
            "t.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\""
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_a_hint() {
        let mut f = fields("delay = \"1s\"\njiter = \"1ms\"\n");
        f.duration("delay").unwrap();
        f.duration("jitter").unwrap();
        let e = f.finish().unwrap_err();
        assert_eq!(e.loc, "x.toml:2:1");
        assert!(e.message.contains("unknown key \"jiter\""), "{e}");
        assert!(e.message.contains("did you mean \"jitter\""), "{e}");
    }

    #[test]
    fn syntax_errors_are_located() {
        let e = parse_toml("bad.toml", "a = 1\nb = \n").unwrap_err();
        assert!(e.loc.starts_with("bad.toml:2:"), "{e}");
        assert!(e.message.starts_with("invalid TOML"), "{e}");
    }

    #[test]
    fn numbers_and_ranges() {
        let mut f = fields("p = 1.5\nq = 0.25\nn = \"7\"\n");
        assert!(f.number_in("p", 0.0, 1.0).is_err());
        assert_eq!(f.number_in("q", 0.0, 1.0).unwrap(), Some(0.25));
        assert_eq!(f.integer_in("n", 0, 10).unwrap(), Some(7));
    }

    #[test]
    fn closest_words() {
        assert_eq!(
            closest("latncy", &["latency", "bandwidth"]),
            Some("latency")
        );
        assert_eq!(closest("zzz", &["latency", "bandwidth"]), None);
    }
}
