//! A JSON document's edit, as `http_rewrite` (a body) and `sse` (each
//! event's data) take it: an RFC 7396 merge patch (`patch_json`: members
//! set, `null` removes one, arrays replaced whole) or an RFC 6902 JSON
//! Patch (`patch_ops`: operations at JSON Pointers, so one array element
//! can change — OpenAI's `/choices/0/finish_reason` — and `test`
//! operations make it conditional: a patch whose operation fails is not
//! applied at all).

use serde_json::Value as Json;

use crate::settings::{Fields, ProfileError, Value, to_json};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JsonEdit {
    /// RFC 7396: `patch_json`.
    Merge(Json),
    /// RFC 6902: `patch_ops`.
    Ops(json_patch::Patch),
}

impl JsonEdit {
    /// `patch_json` or `patch_ops` (one at most): JSON text, or (a
    /// profile's table or array, an API body's object or array) the patch
    /// itself.
    pub(crate) fn parse(f: &mut Fields) -> Result<Option<JsonEdit>, ProfileError> {
        let merge = take_json(
            f,
            "patch_json",
            "a JSON merge patch like {\"stop_reason\": \"max_tokens\"}",
        )?;
        let ops = take_json(
            f,
            "patch_ops",
            "a JSON Patch like [{\"op\": \"replace\", \"path\": \"/choices/0/finish_reason\", \"value\": \"length\"}]",
        )?;
        match (merge, ops) {
            (Some(_), Some(_)) => Err(f.table_error(
                "give patch_json or patch_ops, not both (a merge patch's members can be operations of the other)",
            )),
            (Some((m, _)), None) => Ok(Some(JsonEdit::Merge(m))),
            (None, Some((ops, loc))) => {
                let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| {
                    f.error(
                        "patch_ops",
                        &loc,
                        format!(
                            "expected a JSON Patch (RFC 6902): a list of {{\"op\": add|remove|replace|move|copy|test, \"path\": \"/a/0/b\", …}} ({e})"
                        ),
                    )
                })?;
                if patch.is_empty() {
                    return Err(f.error("patch_ops", &loc, "an empty JSON Patch changes nothing"));
                }
                Ok(Some(JsonEdit::Ops(patch)))
            }
            (None, None) => Ok(None),
        }
    }

    /// The document after the edit, or `None` when it does not apply: an
    /// operation failed (a `test` that does not hold, a path that is not
    /// there). A merge patch always applies.
    pub(crate) fn apply(&self, doc: &Json) -> Option<Json> {
        let mut now = doc.clone();
        match self {
            JsonEdit::Merge(patch) => merge_patch(&mut now, patch),
            JsonEdit::Ops(ops) => json_patch::patch(&mut now, ops).ok()?,
        }
        Some(now)
    }

    /// The parameter as `check` shows it and `--fault` takes it back.
    pub(crate) fn param(&self) -> (&'static str, String) {
        match self {
            JsonEdit::Merge(m) => ("patch_json", m.to_string()),
            JsonEdit::Ops(ops) => (
                "patch_ops",
                serde_json::to_string(ops).unwrap_or_else(|_| "[]".into()),
            ),
        }
    }
}

/// The JSON a key gives, with where it was given: text is parsed, a table
/// or an array taken as it is.
fn take_json(
    f: &mut Fields,
    key: &'static str,
    like: &str,
) -> Result<Option<(Json, String)>, ProfileError> {
    let Some(node) = f.take(key) else {
        return Ok(None);
    };
    let json = match &node.value {
        Value::Str(text) => serde_json::from_str(text).map_err(|e| {
            f.error(
                key,
                &node.loc,
                format!("expected {like}, got {text:?} ({e})"),
            )
        })?,
        _ => to_json(&node)
            .ok_or_else(|| f.error(key, &node.loc, "expected JSON, a table or a list"))?,
    };
    Ok(Some((json, node.loc.clone())))
}

/// RFC 7396 JSON merge patch: an object's members are merged (a `null`
/// removes one, the others keep their place); anything else replaces the
/// target.
pub(crate) fn merge_patch(target: &mut Json, patch: &Json) {
    let Json::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Json::Object(serde_json::Map::new());
    }
    let Json::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in members {
        if v.is_null() {
            t.shift_remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Json::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(v: Json) -> JsonEdit {
        JsonEdit::Ops(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn a_json_patch_changes_one_array_element_and_only_when_its_test_holds() {
        let finish = ops(json!([
            {"op": "test", "path": "/choices/0/finish_reason", "value": "stop"},
            {"op": "replace", "path": "/choices/0/finish_reason", "value": "length"},
        ]));
        let last =
            json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let now = finish.apply(&last).unwrap();
        assert_eq!(now["choices"][0]["finish_reason"], "length");
        assert_eq!(now["id"], "c");
        // Earlier chunks (finish_reason null) and other shapes: not applied.
        let middle = json!({"choices": [{"delta": {"content": "hi"}, "finish_reason": null}]});
        assert_eq!(finish.apply(&middle), None);
        assert_eq!(finish.apply(&json!({"error": "x"})), None);
        assert_eq!(finish.apply(&json!([1, 2])), None);
        // add, remove, move, copy at pointers (RFC 6902's escapes too).
        let edit = ops(json!([
            {"op": "add", "path": "/a~1b", "value": 1},
            {"op": "remove", "path": "/x/0"},
            {"op": "copy", "from": "/a~1b", "path": "/c"},
            {"op": "move", "from": "/c", "path": "/x/-"},
        ]));
        assert_eq!(
            edit.apply(&json!({"x": [9, 8]})).unwrap(),
            json!({"x": [8, 1], "a/b": 1})
        );
    }

    #[test]
    fn a_merge_patch_always_applies() {
        let m = JsonEdit::Merge(json!({"a": null, "b": {"c": 1}}));
        assert_eq!(
            m.apply(&json!({"a": 1, "z": 2})).unwrap(),
            json!({"z": 2, "b": {"c": 1}})
        );
        assert_eq!(m.apply(&json!([1])).unwrap(), json!({"b": {"c": 1}}));
    }

    #[test]
    fn a_json_patch_reads_back_as_shown() {
        let e = ops(
            json!([{"op": "test", "path": "/a/0", "value": "x"}, {"op": "remove", "path": "/b"}]),
        );
        let (key, text) = e.param();
        assert_eq!(key, "patch_ops");
        let back: json_patch::Patch = serde_json::from_str(&text).unwrap();
        assert_eq!(JsonEdit::Ops(back), e);
    }
}
