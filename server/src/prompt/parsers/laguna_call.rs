//! Laguna tool calls as Ollama's `laguna` parser reads them (`parseLagunaToolCall`,
//! `parseToolAlias`): the text of a `<tool_call>` block, a `<user>` block or a bare JSON object,
//! in either of the model's two forms:
//! - `name<arg_key>k</arg_key><arg_value>v</arg_value>…` (values typed by the tool's schema, as
//!   Ollama's `parseValue` does), or `name{json arguments}`;
//! - `{"name": …, "arguments": {…}}` (Go's `json.Unmarshal`: field names in any case, `name` a
//!   string, `arguments` an object — not even `null`; top-level keys in the model's order).
//!
//! A stray inner `<tool_call>` cuts the text (the first call wins), as does `</tool_call>`.
//! Common names are mapped to the request's tools (`read_file` → `read`, `write_file` → `write`,
//! `edit_file` → `edit`, `web_fetch` → `webfetch`) when the request has that tool; other names are
//! kept as the model wrote them.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value as J};

use super::govalue;
use super::qwen3coder_call::{param_types, typed_value};
use super::tool_names;

/// A parsed call: its name and arguments.
pub(super) type Call = (String, Map<String, J>);

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Go's RE2 `(?s)<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>` (`\s` is ASCII).
static ARG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<arg_key>(.*?)</arg_key>[\t\n\x0C\r ]*<arg_value>(.*?)</arg_value>")
        .expect("valid regex")
});

/// `cleanLagunaToolCallRaw`: trimmed, leading `<tool_call>` tags dropped, cut at `</tool_call>`
/// and at an inner `<tool_call>`.
fn clean(raw: &str) -> &str {
    let mut raw = raw.trim();
    while let Some(rest) = raw.strip_prefix(OPEN) {
        raw = rest.trim();
    }
    if let Some(i) = raw.find(CLOSE) {
        raw = raw[..i].trim();
    }
    if let Some(i) = raw.find(OPEN) {
        let before = raw[..i].trim();
        if !before.is_empty() {
            return before;
        }
        raw = raw[i + OPEN.len()..].trim();
    }
    raw
}

/// `lagunaResolveToolName`: a declared name, or the declared tool a common alias stands for.
fn resolve(name: &str, schemas: &[J]) -> Option<String> {
    let names = tool_names(schemas);
    if names.iter().any(|n| n == name) {
        return Some(name.to_string());
    }
    let alias = match name {
        "read_file" => "read",
        "write_file" => "write",
        "edit_file" => "edit",
        "web_fetch" => "webfetch",
        _ => return None,
    };
    names.iter().any(|n| n == alias).then(|| alias.to_string())
}

/// Go's `json.Unmarshal` of text into a struct with the string field `name` and, when
/// `arguments`, the ordered-map field `arguments`; `None` where Go returns an error.
fn decode(text: &str, arguments: bool) -> Option<Call> {
    let rule = if arguments {
        govalue::Arguments::Strict
    } else {
        govalue::Arguments::Ignored
    };
    govalue::call(text, false, rule)
}

/// An object as Ollama's ordered argument map decodes it (anything else, `null` included, fails).
fn object(v: J) -> Option<Map<String, J>> {
    match v {
        J::Object(m) => Some(m.into_iter().map(|(k, v)| (k, govalue::any(v))).collect()),
        _ => None,
    }
}

/// `parseLagunaToolCall`; `None` where Go returns an error.
pub(super) fn parse(raw: &str, schemas: &[J]) -> Option<Call> {
    let raw = clean(raw);
    if raw.starts_with('{') {
        let (name, args) = decode(raw, true)?;
        if name.is_empty() {
            return None;
        }
        return Some((resolve(&name, schemas).unwrap_or(name), args));
    }
    let (name, args_text) = match raw.find("<arg_key>").or_else(|| raw.find('{')) {
        Some(i) => (&raw[..i], &raw[i..]),
        None => (raw, ""),
    };
    let name = name.trim();
    let name = resolve(name, schemas).unwrap_or_else(|| name.to_string());
    let args_text = args_text.trim();
    if args_text.starts_with('{') {
        let args = object(govalue::decode(args_text)?)?;
        return Some((name, args));
    }
    let mut args = Map::new();
    for m in ARG.captures_iter(args_text) {
        let key = m[1].trim();
        let types = param_types(schemas, &name, key);
        args.insert(key.to_string(), typed_value(&m[2], &types));
    }
    Some((name, args))
}

/// `lagunaToolCallName`: the name a block's text starts with (up to `<arg_key>`, `{` or a line
/// break), or its JSON `name`.
fn call_name(raw: &str) -> Option<String> {
    let raw = clean(raw);
    let name = if raw.starts_with('{') {
        decode(raw, false)?.0.trim().to_string()
    } else {
        let end = raw
            .find("<arg_key>")
            .or_else(|| raw.find('{'))
            .or_else(|| raw.find(['\r', '\n']))
            .unwrap_or(raw.len());
        raw[..end].trim().to_string()
    };
    (!name.is_empty()).then_some(name)
}

/// `parseToolAlias`: a `<user>` block is a call when it names a declared tool (or an alias of
/// one) and parses.
pub(super) fn alias(raw: &str, schemas: &[J]) -> Option<Call> {
    let raw = clean(raw);
    resolve(&call_name(raw)?, schemas)?;
    parse(raw, schemas)
}

/// `lagunaLooksLikeJSONToolCall` for text starting at a `{`: it names `"name"` or `"arguments"`,
/// or (while streaming) opens with `{"` or `{` and a line break.
pub(super) fn looks_like_call(raw: &str, done: bool) -> bool {
    if raw.contains("\"name\"") || raw.contains("\"arguments\"") {
        return true;
    }
    !done && ["{\"", "{\n", "{\r\n"].iter().any(|p| raw.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<J> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                    "units": {"anyOf": [{"type": "number"}, {"type": "string"}]}}}}}),
            json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
                "properties": {"path": {"type": "string"}}}}}),
        ]
    }

    fn call(name: &str, args: J) -> Option<Call> {
        Some((name.into(), args.as_object().cloned().unwrap()))
    }

    #[test]
    fn both_forms_parse_as_ollama_does() {
        let t = tools();
        let cases = [
            (
                "get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key> days </arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key> <arg_value>\n2.5\n</arg_value>",
                call("get_weather", json!({"location": "Paris", "days": 3, "units": 2.5})),
            ),
            // Lazy matching: a key without a value joins the next one.
            (
                "get_weather<arg_key>a</arg_key>x<arg_key>b</arg_key><arg_value>null</arg_value>",
                call("get_weather", json!({"a</arg_key>x<arg_key>b": null})),
            ),
            (
                "\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"./go.mod\",\"o\":{\"b\":1,\"a\":2}}}\n",
                call("read", json!({"path": "./go.mod", "o": {"a": 2, "b": 1}})),
            ),
            (
                "{\"NAME\": \"other\", \"x\": 1}",
                call("other", json!({})),
            ),
            ("get_weather\n{\"location\":\"SF\"}", call("get_weather", json!({"location": "SF"}))),
            (
                "skill\n{\"name\":\"a\"}\n<tool_call>skill\n{\"name\":\"b\"}",
                call("skill", json!({"name": "a"})),
            ),
            ("<tool_call> <tool_call>noop</tool_call>junk", call("noop", json!({}))),
            ("", call("", json!({}))),
            ("unknown thing\nmore", call("unknown thing\nmore", json!({}))),
            // Errors.
            ("{\"arguments\": {}}", None),
            ("{\"name\": \"f\", \"arguments\": null}", None),
            ("{\"name\": 1}", None),
            ("{\"name\": \"f\"} tail", None),
            ("f\n{\"a\": 1} tail", None),
            ("f {\"x\": \"</tool_call>\"}", None),
        ];
        for (raw, want) in cases {
            assert_eq!(parse(raw, &t), want, "{raw:?}");
        }
    }

    #[test]
    fn user_blocks_must_name_a_declared_tool() {
        let t = tools();
        assert_eq!(
            alias(
                "read\n<arg_key>path</arg_key>\n<arg_value>/a</arg_value>\n",
                &t
            ),
            call("read", json!({"path": "/a"}))
        );
        assert_eq!(
            alias("\n{\"name\":\"read_file\",\"arguments\":{}}\n", &t),
            call("read", json!({}))
        );
        for raw in [
            "hello",
            "nope\n<arg_key>a</arg_key><arg_value>1</arg_value>",
            "{\"name\": \"read\", \"arguments\": null}",
            "",
        ] {
            assert_eq!(alias(raw, &t), None, "{raw:?}");
        }
        assert_eq!(alias("read_file", &t), call("read", json!({})));
        // The name stops at a line break, the parsed call does not.
        assert_eq!(alias("read\nmore", &t), call("read\nmore", json!({})));
    }

    #[test]
    fn json_calls_are_recognised_by_their_start_or_keys() {
        assert!(looks_like_call("{\"a\": 1}", false));
        assert!(looks_like_call("{\n", false));
        assert!(!looks_like_call("{\n", true));
        assert!(looks_like_call("{ \"name\": 1", true));
        assert!(!looks_like_call("{ x", false));
    }
}
