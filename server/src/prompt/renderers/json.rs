//! Ollama's API values as Go's `encoding/json` prints them, for renderers that write tools, tool
//! calls or arguments into the prompt: struct fields in declaration order with their `omitempty`
//! rules, tool properties and call arguments in the client's order (Ollama keeps them in ordered
//! maps), nested `any` values as Go decodes them (maps with sorted keys, numbers as float64), and
//! `<`, `>`, `&` escaped as `\u003c`… ([`go`]).

use serde_json::{Map, Value as J};

use crate::prompt::gotmpl::{json_string, Value};
use crate::prompt::ToolCall;

/// Compact JSON exactly as Go's `json.Marshal` writes this value (HTML-escaped).
pub fn go(v: &J) -> String {
    json_string(v)
}

/// A nested `any`: Go decoded it into `map[string]any` (sorted keys) and float64 numbers.
pub fn any(v: &J) -> J {
    Value::from_json_any(v).to_json()
}

/// `api.Tool`: `{type, items?, function: {name, description?, parameters: {type, $defs?, items?,
/// required?, properties}}}`; properties are `api.ToolProperty` values in the client's order.
pub fn tool(t: &J) -> J {
    let mut out = Map::new();
    out.insert("type".into(), J::String(text(t, "type")));
    if let Some(items) = present(t, "items") {
        out.insert("items".into(), any(items));
    }
    let f = t.get("function").unwrap_or(&J::Null);
    let mut func = Map::new();
    func.insert("name".into(), J::String(text(f, "name")));
    let desc = text(f, "description");
    if !desc.is_empty() {
        func.insert("description".into(), J::String(desc));
    }
    let p = f.get("parameters").unwrap_or(&J::Null);
    let mut params = Map::new();
    params.insert("type".into(), J::String(text(p, "type")));
    for key in ["$defs", "items"] {
        if let Some(v) = present(p, key) {
            params.insert(key.into(), any(v));
        }
    }
    if let Some(r) = strings(p, "required") {
        params.insert("required".into(), r);
    }
    params.insert(
        "properties".into(),
        match p.get("properties").and_then(J::as_object) {
            Some(props) => J::Object(
                props
                    .iter()
                    .map(|(k, v)| (k.clone(), property(v)))
                    .collect(),
            ),
            None => J::Null,
        },
    );
    func.insert("parameters".into(), J::Object(params));
    out.insert("function".into(), J::Object(func));
    J::Object(out)
}

/// `api.ToolProperty`: `{anyOf?, type?, items?, description?, enum?, properties?, required?}`;
/// a single type prints as a string, several as an array.
pub fn property(p: &J) -> J {
    let mut out = Map::new();
    if let Some(a) = p
        .get("anyOf")
        .and_then(J::as_array)
        .filter(|a| !a.is_empty())
    {
        out.insert("anyOf".into(), J::Array(a.iter().map(property).collect()));
    }
    match p.get("type") {
        Some(J::String(s)) => {
            out.insert("type".into(), J::String(s.clone()));
        }
        Some(J::Array(a)) if a.len() == 1 => {
            out.insert("type".into(), a[0].clone());
        }
        Some(J::Array(a)) if !a.is_empty() => {
            out.insert("type".into(), J::Array(a.clone()));
        }
        _ => {}
    }
    if let Some(items) = present(p, "items") {
        out.insert("items".into(), any(items));
    }
    let desc = text(p, "description");
    if !desc.is_empty() {
        out.insert("description".into(), J::String(desc));
    }
    if let Some(e) = p
        .get("enum")
        .and_then(J::as_array)
        .filter(|a| !a.is_empty())
    {
        out.insert("enum".into(), J::Array(e.iter().map(any).collect()));
    }
    if let Some(props) = p.get("properties").and_then(J::as_object) {
        out.insert(
            "properties".into(),
            J::Object(
                props
                    .iter()
                    .map(|(k, v)| (k.clone(), property(v)))
                    .collect(),
            ),
        );
    }
    if let Some(r) = strings(p, "required") {
        out.insert("required".into(), r);
    }
    J::Object(out)
}

/// A call's arguments: top-level keys in the order the model or client gave them, values as Go
/// decoded them.
pub fn arguments(args: &Map<String, J>) -> J {
    J::Object(args.iter().map(|(k, v)| (k.clone(), any(v))).collect())
}

/// `api.ToolCall`: `{id?, function: {index, name, arguments}}`.
pub fn call(c: &ToolCall) -> J {
    let mut out = Map::new();
    if !c.id.is_empty() {
        out.insert("id".into(), J::String(c.id.clone()));
    }
    let mut f = Map::new();
    f.insert("index".into(), J::from(c.index));
    f.insert("name".into(), J::String(c.name.clone()));
    f.insert("arguments".into(), arguments(&c.arguments));
    out.insert("function".into(), J::Object(f));
    J::Object(out)
}

/// Ollama's `marshalWithSpaces`: a space after every `:` and `,` outside strings.
pub fn with_spaces(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() + compact.len() / 8);
    let (mut in_str, mut esc) = (false, false);
    for c in compact.chars() {
        out.push(c);
        if in_str {
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            ':' | ',' => out.push(' '),
            _ => {}
        }
    }
    out
}

/// Undoes Go's HTML escaping (`\u003c`, `\u003e`, `\u0026`) in compact JSON, as an encoder with
/// `SetEscapeHTML(false)` writes it; every other escape is kept as it is.
pub fn unescape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let esc = &rest[i..];
        let plain = [("\\u003c", '<'), ("\\u003e", '>'), ("\\u0026", '&')]
            .iter()
            .find(|(e, _)| esc.starts_with(e));
        match plain {
            Some((e, c)) => {
                out.push(*c);
                rest = &esc[e.len()..];
            }
            None => {
                // Any other escape (`\\`, `\"`, `\n`, `\u2028`…) is copied whole.
                let n = esc[1..].chars().next().map_or(0, char::len_utf8);
                out.push_str(&esc[..1 + n]);
                rest = &esc[1 + n..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn text(v: &J, key: &str) -> String {
    v.get(key).and_then(J::as_str).unwrap_or("").to_string()
}

fn present<'a>(v: &'a J, key: &str) -> Option<&'a J> {
    v.get(key).filter(|x| !x.is_null())
}

fn strings(v: &J, key: &str) -> Option<J> {
    let a: Vec<J> = v
        .get(key)?
        .as_array()?
        .iter()
        .filter(|x| x.is_string())
        .cloned()
        .collect();
    (!a.is_empty()).then_some(J::Array(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_print_in_ollamas_field_order_with_client_property_order() {
        let t = json!({"function": {"parameters": {"properties": {
            "zeta": {"description": "<z>", "type": ["string"]},
            "alpha": {"enum": ["a", 1], "type": ["string", "null"]}},
            "required": ["zeta"], "type": "object"}, "name": "f"}, "type": "function"});
        assert_eq!(
            go(&tool(&t)),
            r#"{"type":"function","function":{"name":"f","parameters":{"type":"object","required":["zeta"],"properties":{"zeta":{"type":"string","description":"\u003cz\u003e"},"alpha":{"type":["string","null"],"enum":["a",1]}}}}}"#
        );
        // No parameters at all: Go prints the zero struct with null properties.
        assert_eq!(
            go(&tool(
                &json!({"type": "function", "function": {"name": "g", "description": "d"}})
            )),
            r#"{"type":"function","function":{"name":"g","description":"d","parameters":{"type":"","properties":null}}}"#
        );
    }

    #[test]
    fn calls_keep_argument_order_and_sort_nested_maps() {
        let mut args = Map::new();
        args.insert("b".into(), json!({"y": 1, "x": 2.5}));
        args.insert("a".into(), json!("s&t"));
        let c = ToolCall {
            id: String::new(),
            index: 0,
            name: "f".into(),
            arguments: args,
        };
        assert_eq!(
            go(&call(&c)),
            r#"{"function":{"index":0,"name":"f","arguments":{"b":{"x":2.5,"y":1},"a":"s\u0026t"}}}"#
        );
    }

    #[test]
    fn spaces_go_outside_strings_only() {
        assert_eq!(
            with_spaces(r#"{"a":"x, y: \"z,\"","b":[1,2]}"#),
            r#"{"a": "x, y: \"z,\"", "b": [1, 2]}"#
        );
    }
}
