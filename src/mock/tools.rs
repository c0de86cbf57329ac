//! Tool use in the mock's answers: when a request offers tools, whether
//! the "model" calls one and which, and the call's arguments, made from
//! the tool's JSON Schema — so an agent's loop (call, run the tool, send
//! its result, get the final answer) runs against the mock as against the
//! provider.
//!
//! The rule, the same for both APIs: a tool the request forces is called
//! (Anthropic's `tool_choice` `{"type": "tool"}` or `any`, OpenAI's
//! `required` or a named function); with the choice left to the model
//! (`auto`, or none given), the first tool is called unless the last
//! message already carries a tool's result, which is then answered in
//! text; `none` never calls one.

use serde_json::{Map, Value, json};

/// A tool call the answer makes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub(crate) name: String,
    pub(crate) input: Value,
    /// The request forced it: no words before it.
    pub(crate) forced: bool,
}

/// The call an Anthropic Messages request gets, if any.
pub(crate) fn anthropic(o: &Map<String, Value>) -> Option<Call> {
    // The user's own tools (a server tool, web search…, is the API's).
    let tools: Vec<&Value> = o
        .get("tools")?
        .as_array()?
        .iter()
        .filter(|t| t.get("type").is_none_or(|k| k == "custom"))
        .collect();
    if tools.is_empty() {
        return None;
    }
    let choice = o.get("tool_choice");
    let kind = choice
        .and_then(|c| c.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("auto");
    let named = |name: &str| tools.iter().copied().find(|t| t["name"] == name);
    let tool = match kind {
        "none" => return None,
        "tool" => named(choice?.get("name")?.as_str()?)?,
        "any" => tools[0],
        _ => {
            let last = o.get("messages")?.as_array()?.last()?;
            let answered = last["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
            if answered {
                return None;
            }
            tools[0]
        }
    };
    Some(Call {
        name: tool["name"].as_str().unwrap_or("tool").to_string(),
        input: arguments(&tool["input_schema"]),
        forced: kind == "tool" || kind == "any",
    })
}

/// Why the API refuses an Anthropic request's `tool_choice` (a 400), if
/// it does: it names a tool the request does not offer.
pub(crate) fn anthropic_refusal(o: &Map<String, Value>) -> Option<String> {
    let choice = o.get("tool_choice")?;
    if choice.get("type")? != "tool" {
        return None;
    }
    let name = choice.get("name").and_then(Value::as_str).unwrap_or("");
    let offered = o
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|ts| ts.iter().any(|t| t["name"] == name));
    (!offered).then(|| format!("tool_choice.name: Tool '{name}' not found in provided tools"))
}

/// Why the API refuses an OpenAI request's `tool_choice` (a 400), if it
/// does: any without `tools`, or a function they do not hold.
pub(crate) fn openai_refusal(o: &Map<String, Value>) -> Option<String> {
    // `null`, as clients that pass `None` send it, is no choice.
    let choice = o.get("tool_choice").filter(|c| !c.is_null())?;
    let tools = o
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty());
    let Some(tools) = tools else {
        return Some(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
                .into(),
        );
    };
    let name = choice.get("function")?.get("name")?.as_str()?;
    let offered = tools.iter().any(|t| t["function"]["name"] == name);
    (!offered).then(|| {
        format!(
            "Invalid value for 'tool_choice': function '{name}' is not one of the provided tools."
        )
    })
}

/// The call an OpenAI Chat Completions request gets, if any.
pub(crate) fn openai(o: &Map<String, Value>) -> Option<Call> {
    let tools = o.get("tools")?.as_array().filter(|t| !t.is_empty())?;
    let function = |t: &Value| t.get("function").cloned().unwrap_or(Value::Null);
    let tool = match o.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => return None,
        Some(Value::String(s)) if s == "required" => function(&tools[0]),
        Some(Value::Object(c)) => {
            let name = c.get("function")?.get("name")?.as_str()?;
            tools.iter().map(function).find(|f| f["name"] == name)?
        }
        _ => {
            let last = o.get("messages")?.as_array()?.last()?;
            if last["role"] == "tool" {
                return None;
            }
            function(&tools[0])
        }
    };
    Some(Call {
        name: tool["name"].as_str().unwrap_or("tool").to_string(),
        input: arguments(&tool["parameters"]),
        forced: true,
    })
}

/// A call's arguments: an object always (a tool with no schema gets
/// `{}`), its `$ref`s resolved against the schema's own definitions.
fn arguments(schema: &Value) -> Value {
    match example_in(schema, schema, 0) {
        v @ Value::Object(_) => v,
        _ => json!({}),
    }
}

/// A value that fits `schema` (the parts of JSON Schema tools use): an
/// object's required properties (all of them when none is required), an
/// enum's first value, a string, a number at its minimum or 1, `true`, an
/// array of one item when it needs one.
#[cfg(test)]
pub(crate) fn example(schema: &Value, depth: usize) -> Value {
    example_in(schema, schema, depth)
}

/// [`example`], `$ref`s (`#/$defs/…`, `#/definitions/…`) looked up in
/// `root`; the first branch of `anyOf`/`oneOf` that is not null; `allOf`
/// merged.
fn example_in(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix("#/")
            .map(|p| p.split('/').fold(root, |v, k| &v[k]))
            .filter(|t| !t.is_null());
        return match target {
            Some(t) => example_in(t, root, depth + 1),
            None => json!({}),
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let pick = branches
                .iter()
                .find(|b| b.get("type").is_none_or(|t| t != "null"))
                .or(branches.first());
            if let Some(b) = pick {
                return example_in(b, root, depth + 1);
            }
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for b in all {
            match example_in(b, root, depth + 1) {
                Value::Object(o) => merged.extend(o),
                other if all.len() == 1 => return other,
                _ => {}
            }
        }
        return Value::Object(merged);
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // A list of types: the first that is not null.
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match kind {
        "object" => {
            let props = schema.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            for (name, s) in props.into_iter().flatten() {
                if required.is_empty() || required.contains(&name.as_str()) {
                    out.insert(name.clone(), example_in(s, root, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            match min {
                0 => json!([]),
                n => Value::Array(
                    (0..n.min(8))
                        .map(|_| {
                            example_in(schema.get("items").unwrap_or(&Value::Null), root, depth + 1)
                        })
                        .collect(),
                ),
            }
        }
        "integer" => json!(schema.get("minimum").and_then(Value::as_i64).unwrap_or(1)),
        "number" => json!(schema.get("minimum").and_then(Value::as_f64).unwrap_or(1.0)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("netchaos"),
    }
}

/// `json` cut in two pieces, as a streamed call's arguments arrive.
pub(crate) fn pieces(json: &str) -> Vec<String> {
    let mid = json
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| i >= json.len() / 2)
        .unwrap_or(json.len());
    [&json[..mid], &json[mid..]]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    const WEATHER: &str = r#"{"name": "get_weather", "description": "w",
        "input_schema": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 3}, "verbose": {"type": "boolean"}},
            "required": ["city", "unit", "days"]}}"#;

    #[test]
    fn auto_calls_the_first_tool_until_a_result_comes_back() {
        let tool: Value = serde_json::from_str(WEATHER).unwrap();
        let ask = json!({"tools": [tool], "messages": [{"role": "user", "content": "weather?"}]});
        let call = anthropic(&obj(ask)).unwrap();
        assert_eq!(call.name, "get_weather");
        assert_eq!(
            call.input,
            json!({"city": "netchaos", "unit": "c", "days": 3})
        );
        let answered = json!({"tools": [tool], "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "sunny"}]}]});
        assert_eq!(anthropic(&obj(answered)), None);
        let none = json!({"tools": [tool], "tool_choice": {"type": "none"},
                          "messages": [{"role": "user", "content": "x"}]});
        assert_eq!(anthropic(&obj(none)), None);
        assert_eq!(anthropic(&obj(json!({"messages": []}))), None);
    }

    #[test]
    fn openai_forced_and_named_calls() {
        let f = |n: &str| {
            json!({"type": "function", "function": {"name": n,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}})
        };
        let base =
            json!({"tools": [f("a"), f("b")], "messages": [{"role": "user", "content": "x"}]});
        assert_eq!(openai(&obj(base.clone())).unwrap().name, "a");
        let mut named = base.clone();
        named["tool_choice"] = json!({"type": "function", "function": {"name": "b"}});
        assert_eq!(openai(&obj(named)).unwrap().input, json!({"q": "netchaos"}));
        let mut after = base.clone();
        after["messages"] = json!([{"role": "tool", "tool_call_id": "c", "content": "r"}]);
        assert_eq!(openai(&obj(after.clone())), None);
        after["tool_choice"] = json!("required");
        assert_eq!(openai(&obj(after)).unwrap().name, "a");
    }

    #[test]
    fn a_choice_of_a_tool_not_offered_is_refused() {
        let tool = json!({"name": "a", "input_schema": {}});
        let ask = |choice: Value, tools: Value| {
            obj(json!({"tools": tools, "tool_choice": choice, "messages": []}))
        };
        let named = |n: &str| json!({"type": "tool", "name": n});
        assert_eq!(anthropic_refusal(&ask(named("a"), json!([tool]))), None);
        let r = anthropic_refusal(&ask(named("b"), json!([tool]))).unwrap();
        assert!(r.contains("'b' not found"), "{r}");
        assert_eq!(
            anthropic_refusal(&ask(json!({"type": "any"}), json!([tool]))),
            None
        );
        let f = json!([{"type": "function", "function": {"name": "a"}}]);
        let fname = |n: &str| json!({"type": "function", "function": {"name": n}});
        assert_eq!(openai_refusal(&ask(fname("a"), f.clone())), None);
        assert!(
            openai_refusal(&ask(fname("b"), f.clone()))
                .unwrap()
                .contains("'b'")
        );
        assert_eq!(openai_refusal(&ask(json!("auto"), f)), None);
        assert_eq!(openai_refusal(&ask(Value::Null, Value::Null)), None);
        assert!(
            openai_refusal(&ask(json!("auto"), Value::Null))
                .unwrap()
                .contains("only allowed when 'tools' are specified")
        );
    }

    #[test]
    fn arguments_are_objects_and_follow_what_pydantic_writes() {
        assert_eq!(arguments(&Value::Null), json!({}));
        assert_eq!(arguments(&json!({})), json!({}));
        // A nested model by $ref, an optional field as anyOf with null.
        let schema = json!({"type": "object", "$defs": {"City": {"type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "properties": {"city": {"$ref": "#/$defs/City"},
                           "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                           "both": {"allOf": [{"$ref": "#/$defs/City"}]}},
            "required": ["city", "days", "both"]});
        assert_eq!(
            arguments(&schema),
            json!({"city": {"name": "netchaos"}, "days": 1, "both": {"name": "netchaos"}})
        );
        // A server tool is not the user's to call.
        let server = json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                            "messages": [{"role": "user", "content": "x"}]});
        assert_eq!(anthropic(&obj(server)), None);
    }

    #[test]
    fn examples_fit_their_schemas_and_pieces_rejoin() {
        assert_eq!(example(&json!({"type": ["null", "number"]}), 0), json!(1.0));
        assert_eq!(
            example(
                &json!({"type": "array", "minItems": 2, "items": {"type": "boolean"}}),
                0
            ),
            json!([true, true])
        );
        assert_eq!(example(&json!({"const": 7}), 0), json!(7));
        let nested = json!({"type": "object", "properties": {"a": {"type": "object",
            "properties": {"b": {"type": "integer"}}}}});
        assert_eq!(example(&nested, 0), json!({"a": {"b": 1}}));
        let j = r#"{"city":"netchaos","é":1}"#;
        assert_eq!(pieces(j).concat(), j);
        assert_eq!(pieces(j).len(), 2);
    }
}
