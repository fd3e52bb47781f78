//! Builds the template data Ollama hands to Go templates from our request types: messages as
//! `templateMessage` structs, tools as `templateTool` structs (JSON-printing `Stringer`s), and
//! tool-call arguments as JSON-printing Go maps. Field names, JSON tags, omitempty and key order
//! follow Ollama's types because templates print them byte-for-byte.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value as J};

use super::gotmpl::{json_string, GoList, GoMap, GoStruct, Value};
use super::render::{Message, ToolCall};

fn s(v: &str) -> Value {
    Value::str(v)
}

fn strukt(
    kind: &'static str,
    fields: Vec<(&'static str, Value)>,
    json: Option<J>,
    display: Option<String>,
) -> Value {
    Value::Struct(Arc::new(GoStruct {
        kind,
        fields,
        json,
        display,
    }))
}

/// A Go map with a JSON `String()` (Ollama's `templateArgs` / `templateProperties`).
fn json_map(entries: BTreeMap<String, Value>) -> Value {
    Value::Map(Arc::new(GoMap {
        entries,
        stringer_json: true,
    }))
}

/// `templateMessage` (no JSON tags, so `json .` uses the Go field names; nil slices are `null`).
pub fn message(m: &Message) -> Value {
    let calls: Vec<Value> = m.tool_calls.iter().map(tool_call).collect();
    let nil_if_empty = |v: Vec<J>| if v.is_empty() { J::Null } else { J::Array(v) };
    let json = json!({
        "Role": m.role,
        "Content": m.content,
        "Thinking": m.thinking.as_deref().unwrap_or(""),
        "Images": nil_if_empty(vec![J::String(String::new()); m.images]),
        "ToolCalls": nil_if_empty(calls.iter().map(Value::to_json).collect()),
        "ToolName": m.tool_name.as_deref().unwrap_or(""),
        "ToolCallID": m.tool_call_id.as_deref().unwrap_or(""),
    });
    strukt(
        "Message",
        vec![
            ("Role", s(&m.role)),
            ("Content", s(&m.content)),
            ("Thinking", s(m.thinking.as_deref().unwrap_or(""))),
            // Only presence and count matter to templates; the bytes travel separately.
            ("Images", Value::list(vec![Value::str(""); m.images])),
            ("ToolCalls", Value::list(calls)),
            ("ToolName", s(m.tool_name.as_deref().unwrap_or(""))),
            ("ToolCallID", s(m.tool_call_id.as_deref().unwrap_or(""))),
        ],
        Some(json),
        None,
    )
}

fn tool_call(c: &ToolCall) -> Value {
    let args = json_map(
        c.arguments
            .iter()
            .map(|(k, v)| (k.clone(), Value::from_json_any(v)))
            .collect(),
    );
    let function = strukt(
        "ToolCallFunction",
        vec![
            ("Index", Value::Int(c.index)),
            ("Name", s(&c.name)),
            ("Arguments", args),
        ],
        None,
        None,
    );
    strukt(
        "ToolCall",
        vec![("ID", s(&c.id)), ("Function", function)],
        None,
        None,
    )
}

/// `.Tools`: a `templateTools` slice (prints as its JSON array), or a nil slice when empty: that
/// prints (and `json` marshals) as `null`, is false in `if` and ranges over nothing.
pub fn tools(tools: &[J]) -> Value {
    let items: Vec<Value> = tools.iter().map(tool).collect();
    Value::List(Arc::new(GoList {
        items,
        stringer_json: true,
    }))
}

fn str_field(o: &J, k: &str) -> String {
    o.get(k).and_then(J::as_str).unwrap_or("").to_string()
}

/// Go decodes `any` fields into maps with sorted keys and float64 numbers; this re-encodes the
/// way `json.Marshal` would then print them.
fn any_json(v: &J) -> J {
    Value::from_json_any(v).to_json()
}

fn tool(t: &J) -> Value {
    let f = t.get("function").cloned().unwrap_or(J::Null);
    let p = f.get("parameters").cloned().unwrap_or(J::Null);
    let required: Vec<String> = p
        .get("required")
        .and_then(J::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let props_in = p.get("properties").and_then(J::as_object);
    // templateProperties is a Go map: sorted keys in JSON and in range.
    let props: BTreeMap<String, Value> = props_in
        .map(|o| o.iter().map(|(k, v)| (k.clone(), property(v))).collect())
        .unwrap_or_default();
    let props_json = match props_in {
        Some(_) => J::Object(
            props
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json()))
                .collect(),
        ),
        None => J::Null,
    };

    let mut pj = Map::new();
    pj.insert("type".into(), J::String(str_field(&p, "type")));
    for (key, src) in [("$defs", "$defs"), ("items", "items")] {
        if let Some(v) = p.get(src).filter(|v| !v.is_null()) {
            pj.insert(key.into(), any_json(v));
        }
    }
    if !required.is_empty() {
        pj.insert("required".into(), json!(required));
    }
    pj.insert("properties".into(), props_json);
    let params = strukt(
        "ToolFunctionParameters",
        vec![
            ("Type", s(&str_field(&p, "type"))),
            (
                "Defs",
                p.get("$defs").map(Value::from_json_any).unwrap_or_default(),
            ),
            (
                "Items",
                p.get("items").map(Value::from_json_any).unwrap_or_default(),
            ),
            (
                "Required",
                Value::list(required.iter().map(|r| s(r)).collect()),
            ),
            ("Properties", json_map(props)),
        ],
        Some(J::Object(pj.clone())),
        // Printed as JSON: library templates write `{{ .Function }}` expecting api.ToolFunction's
        // JSON `String()`. (Ollama's newer templateToolFunction lost that method and prints Go
        // struct syntax, a regression we do not reproduce.)
        Some(json_string(&J::Object(pj.clone()))),
    );
    let fj = json!({
        "name": str_field(&f, "name"),
        "description": str_field(&f, "description"),
        "parameters": J::Object(pj),
    });
    let function = strukt(
        "ToolFunction",
        vec![
            ("Name", s(&str_field(&f, "name"))),
            ("Description", s(&str_field(&f, "description"))),
            ("Parameters", params),
        ],
        Some(fj.clone()),
        Some(json_string(&fj)),
    );
    let mut tj = Map::new();
    tj.insert("type".into(), J::String(str_field(t, "type")));
    if let Some(items) = t.get("items").filter(|v| !v.is_null()) {
        tj.insert("items".into(), any_json(items));
    }
    tj.insert("function".into(), fj);
    let tj = J::Object(tj);
    let display = json_string(&tj);
    strukt(
        "Tool",
        vec![
            ("Type", s(&str_field(t, "type"))),
            (
                "Items",
                t.get("items").map(Value::from_json_any).unwrap_or_default(),
            ),
            ("Function", function),
        ],
        Some(tj),
        Some(display),
    )
}

/// `api.ToolProperty`: known keys only (Go drops the rest when decoding), nested `properties`
/// kept in insertion order (an ordered map in Ollama), `type` a string or a list.
fn property(v: &J) -> Value {
    let types: Vec<String> = match v.get("type") {
        Some(J::String(t)) => vec![t.clone()],
        Some(J::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let any_of: Vec<Value> = v
        .get("anyOf")
        .and_then(J::as_array)
        .map(|a| a.iter().map(property).collect())
        .unwrap_or_default();
    let enum_: Vec<J> = v
        .get("enum")
        .and_then(J::as_array)
        .cloned()
        .unwrap_or_default();
    let required: Vec<String> = v
        .get("required")
        .and_then(J::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let nested = v.get("properties").and_then(J::as_object);

    let mut j = Map::new();
    if !any_of.is_empty() {
        j.insert(
            "anyOf".into(),
            J::Array(any_of.iter().map(Value::to_json).collect()),
        );
    }
    let type_json = match types.len() {
        0 => None,
        1 => Some(J::String(types[0].clone())),
        _ => Some(json!(types)),
    };
    if let Some(t) = &type_json {
        j.insert("type".into(), t.clone());
    }
    if let Some(items) = v.get("items").filter(|x| !x.is_null()) {
        j.insert("items".into(), any_json(items));
    }
    let desc = str_field(v, "description");
    if !desc.is_empty() {
        j.insert("description".into(), J::String(desc.clone()));
    }
    if !enum_.is_empty() {
        j.insert(
            "enum".into(),
            J::Array(enum_.iter().map(any_json).collect()),
        );
    }
    let nested_json = nested.map(|o| {
        J::Object(
            o.iter()
                .map(|(k, p)| (k.clone(), property(p).to_json()))
                .collect(),
        )
    });
    if let Some(n) = &nested_json {
        j.insert("properties".into(), n.clone());
    }
    if !required.is_empty() {
        j.insert("required".into(), json!(required));
    }

    // PropertyType prints via its String(): the single type, or Go's `[a b]`.
    let type_display = match types.len() {
        0 => String::new(),
        1 => types[0].clone(),
        _ => format!("[{}]", types.join(" ")),
    };
    let type_value = strukt(
        "PropertyType",
        Vec::new(),
        Some(type_json.unwrap_or(J::Null)),
        Some(type_display),
    );
    let nested_value = match &nested_json {
        Some(n) => strukt(
            "ToolPropertiesMap",
            Vec::new(),
            Some(n.clone()),
            Some(json_string(n)),
        ),
        None => Value::Nil,
    };
    strukt(
        "ToolProperty",
        vec![
            ("AnyOf", Value::list(any_of)),
            ("Type", type_value),
            (
                "Items",
                v.get("items").map(Value::from_json_any).unwrap_or_default(),
            ),
            ("Description", s(&desc)),
            (
                "Enum",
                Value::list(enum_.iter().map(Value::from_json_any).collect()),
            ),
            ("Properties", nested_value),
            (
                "Required",
                Value::list(required.iter().map(|r| s(r)).collect()),
            ),
        ],
        Some(J::Object(j)),
        None,
    )
}
