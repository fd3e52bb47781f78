//! Gemma 4's tool vocabulary, for the `gemma4-small` / `gemma4-large` renderers ([`super::gemma4`]):
//! tool declarations (`<|tool>declaration:NAME{description:…,parameters:{…}}<tool|>`) and the
//! values Gemma 4 writes in calls and responses (`key:value` objects with bare keys, strings
//! between `<|"|>` delimiters, no escaping).
//!
//! Declarations follow Ollama's `Gemma4Renderer.renderToolDeclaration`, which mirrors the HF
//! chat template: properties sorted by name, names that are schema keywords (`description`,
//! `type`, `properties`, `required`, `nullable`) skipped, type names upper-cased, a property's
//! type list printed as the template's stringified Python list (`['STRING', 'NULL']`), a simple
//! `anyOf` of bare types lowered to such a list, `enum` only on strings, `items` only on arrays,
//! `properties`/`required` only on objects (an object without `properties` lists its own
//! non-keyword map entries). Top-level properties are Ollama's `api.ToolProperty` (only its
//! fields survive); `items` and everything under it are the client's raw JSON.

use serde_json::{Map, Value as J};

use crate::prompt::gotmpl::{format_float_g, Value};

/// Gemma 4's string delimiter.
pub const Q: &str = "<|\"|>";

/// One tool's declaration.
pub fn declaration(tool: &J) -> String {
    let f = tool.get("function").unwrap_or(&J::Null);
    let mut s = format!(
        "<|tool>declaration:{}{{description:{Q}{}{Q}",
        text(f, "name"),
        text(f, "description")
    );
    let p = f.get("parameters").unwrap_or(&J::Null);
    let props = p.get("properties").and_then(J::as_object);
    let ptype = text(p, "type");
    if props.is_some() || !ptype.is_empty() {
        let mut parts = Vec::new();
        if let Some(props) = props.filter(|m| !m.is_empty()) {
            let typed: Map<String, J> = props.iter().map(|(k, v)| (k.clone(), typed(v))).collect();
            parts.push(format!("properties:{{{}}}", properties(&typed)));
        }
        let required = strings(p.get("required"));
        if !required.is_empty() {
            parts.push(format!("required:{}", quoted_list(&required)));
        }
        if !ptype.is_empty() {
            parts.push(format!("type:{Q}{}{Q}", go_upper(ptype)));
        }
        s.push_str(&format!(",parameters:{{{}}}", parts.join(",")));
    }
    s.push_str("}<tool|>");
    s
}

/// A value in a call's arguments or a tool response (`formatArgValue`): maps with sorted bare
/// keys, strings between delimiters, integral numbers as integers, others as Go's `%v`.
pub fn arg_value(v: &J) -> String {
    value(v, false)
}

/// `formatArgValue` (bare keys) and `formatSchemaValue` (delimited keys) differ only there.
fn value(v: &J, quote_keys: bool) -> String {
    match v {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::String(s) => format!("{Q}{s}{Q}"),
        J::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        J::Array(a) => {
            let items: Vec<String> = a.iter().map(|x| value(x, quote_keys)).collect();
            format!("[{}]", items.join(","))
        }
        J::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| match quote_keys {
                    true => format!("{Q}{k}{Q}:{}", value(&m[k], true)),
                    false => format!("{k}:{}", value(&m[k], false)),
                })
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

/// Go's `v == float64(int64(v))` → `%d`, else `%v` (amd64: out-of-range conversions give
/// `MinInt64`, so only integral values in range print as integers). FunctionGemma prints its
/// numbers the same way.
pub fn number(f: f64) -> String {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) {
        (f as i64).to_string()
    } else {
        format_float_g(f)
    }
}

/// `topLevelTypedSchemaValueFromToolProperty`: an `api.ToolProperty` as the map the
/// declaration writer reads; its type is one string (a union stringified as the template does).
fn typed(prop: &J) -> J {
    let mut out = Map::new();
    let types = match property_types(prop) {
        t if !t.is_empty() => Some(t),
        _ => simple_any_of(prop),
    };
    if let Some(t) = types {
        let v = match t.as_slice() {
            [one] => one.clone(),
            many => {
                let parts: Vec<String> =
                    many.iter().map(|t| format!("'{}'", go_upper(t))).collect();
                format!("[{}]", parts.join(", "))
            }
        };
        out.insert("type".into(), J::String(v));
    }
    if !text(prop, "description").is_empty() {
        out.insert("description".into(), prop["description"].clone());
    }
    if let Some(e) = prop
        .get("enum")
        .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
    {
        out.insert("enum".into(), e.clone());
    }
    if let Some(items) = prop.get("items").filter(|i| !i.is_null()) {
        out.insert("items".into(), items.clone());
    }
    if let Some(props) = prop.get("properties").and_then(J::as_object) {
        let t = props.iter().map(|(k, v)| (k.clone(), typed(v))).collect();
        out.insert("properties".into(), J::Object(t));
    }
    let required = strings(prop.get("required"));
    if !required.is_empty() {
        out.insert("required".into(), J::from(required));
    }
    J::Object(out)
}

/// `api.PropertyType` of a property: a string or a list of strings.
fn property_types(prop: &J) -> Vec<String> {
    match prop.get("type") {
        Some(J::String(s)) => vec![s.clone()],
        other => strings(other),
    }
}

/// `simpleAnyOfTypes`: the types of an `anyOf` whose branches carry nothing but a type,
/// de-duplicated in order; `None` when any branch is more than that.
fn simple_any_of(prop: &J) -> Option<Vec<String>> {
    let branches = prop.get("anyOf")?.as_array().filter(|a| !a.is_empty())?;
    let mut out: Vec<String> = Vec::new();
    for b in branches {
        let set = |k: &str| b.get(k).is_some_and(|v| !v.is_null());
        let non_empty = |k: &str| {
            b.get(k)
                .and_then(J::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        let types = property_types(b);
        if types.is_empty()
            || non_empty("anyOf")
            || set("items")
            || !text(b, "description").is_empty()
            || non_empty("enum")
            || b.get("properties").is_some_and(J::is_object)
            || non_empty("required")
        {
            return None;
        }
        for t in types {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

const KEYWORDS: [&str; 5] = ["description", "type", "properties", "required", "nullable"];

/// `writeSchemaProperties`: each map-valued entry, by name, as `name:{description,…,type}`.
fn properties(props: &Map<String, J>) -> String {
    let mut keys: Vec<&String> = props.keys().collect();
    keys.sort();
    let mut out = Vec::new();
    for name in keys {
        if KEYWORDS.contains(&name.as_str()) {
            continue;
        }
        let Some(prop) = props[name].as_object() else {
            continue;
        };
        let mut parts = Vec::new();
        if let Some(d) = prop
            .get("description")
            .and_then(J::as_str)
            .filter(|d| !d.is_empty())
        {
            parts.push(format!("description:{Q}{d}{Q}"));
        }
        let types = type_names(prop.get("type"));
        match types.first().map(String::as_str) {
            Some("STRING") => {
                if let Some(e) = prop
                    .get("enum")
                    .and_then(J::as_array)
                    .filter(|e| !e.is_empty())
                {
                    let vals: Vec<String> = e
                        .iter()
                        .map(|v| format!("{Q}{}{Q}", Value::from_json_any(v).go_string()))
                        .collect();
                    parts.push(format!("enum:[{}]", vals.join(",")));
                }
            }
            Some("ARRAY") => {
                if let Some(items) = prop
                    .get("items")
                    .and_then(J::as_object)
                    .filter(|m| !m.is_empty())
                {
                    parts.push(format!("items:{{{}}}", items_spec(items)));
                }
            }
            _ => {}
        }
        if prop.get("nullable") == Some(&J::Bool(true)) {
            parts.push("nullable:true".into());
        }
        if types.first().map(String::as_str) == Some("OBJECT") {
            let nested = match prop.get("properties").and_then(J::as_object) {
                Some(p) => properties(p),
                None => properties(prop),
            };
            parts.push(format!("properties:{{{nested}}}"));
            let required = strings(prop.get("required"));
            if !required.is_empty() {
                parts.push(format!("required:{}", quoted_list(&required)));
            }
        }
        match types.as_slice() {
            [] => {}
            [one] => parts.push(format!("type:{Q}{one}{Q}")),
            many => parts.push(format!("type:{}", quoted_list(many))),
        }
        out.push(format!("{name}:{{{}}}", parts.join(",")));
    }
    out.join(",")
}

/// `writeSchemaItemsSpec`: an array's `items` map, every non-null key in sorted order. A `type`
/// that names no type still writes its separating comma, as the Go code does.
fn items_spec(items: &Map<String, J>) -> String {
    let mut keys: Vec<&String> = items.keys().collect();
    keys.sort();
    let mut out = String::new();
    let mut first = true;
    for key in keys {
        let v = &items[key];
        if v.is_null() {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        match key.as_str() {
            "properties" => {
                let inner = v.as_object().map(properties).unwrap_or_default();
                out.push_str(&format!("properties:{{{inner}}}"));
            }
            "required" => out.push_str(&format!("required:{}", quoted_list(&strings(Some(v))))),
            "type" => match type_names(Some(v)).as_slice() {
                [] => {}
                [one] => out.push_str(&format!("type:{Q}{one}{Q}")),
                many => out.push_str(&format!("type:{}", quoted_list(many))),
            },
            _ => out.push_str(&format!("{key}:{}", value(v, true))),
        }
    }
    out
}

/// `normalizeTypeNames`: a type string or list, upper-cased.
fn type_names(v: Option<&J>) -> Vec<String> {
    match v {
        Some(J::String(s)) => vec![go_upper(s)],
        other => strings(other).iter().map(|s| go_upper(s)).collect(),
    }
}

/// `[<|"|>a<|"|>,<|"|>b<|"|>]`.
fn quoted_list(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| format!("{Q}{s}{Q}")).collect();
    format!("[{}]", parts.join(","))
}

/// The strings of a JSON array (others skipped); empty for anything else.
fn strings(v: Option<&J>) -> Vec<String> {
    v.and_then(J::as_array)
        .map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn text<'a>(v: &'a J, key: &str) -> &'a str {
    v.get(key).and_then(J::as_str).unwrap_or("")
}

/// Go's `strings.ToUpper`: per-rune simple mappings (a rune whose upper case is several runes,
/// such as `ß`, stays as it is).
pub fn go_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, desc: &str, params: J) -> J {
        json!({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    }

    fn q(s: &str) -> String {
        s.replace('`', Q)
    }

    #[test]
    fn declarations_as_ollama_prints_them() {
        let cases = [
            (
                "string, required, sorted properties, no description",
                tool("search", "Search", json!({"type": "object", "required": ["query"], "properties": {
                    "query": {"type": "string", "description": "Search query"},
                    "limit": {"type": "integer"}}})),
                "<|tool>declaration:search{description:`Search`,parameters:{properties:{limit:{type:`INTEGER`},query:{description:`Search query`,type:`STRING`}},required:[`query`],type:`OBJECT`}}<tool|>",
            ),
            (
                "type only, no properties",
                tool("raw", "Raw input", json!({"type": "object"})),
                "<|tool>declaration:raw{description:`Raw input`,parameters:{type:`OBJECT`}}<tool|>",
            ),
            (
                "no parameters at all",
                json!({"type": "function", "function": {"name": "ping"}}),
                "<|tool>declaration:ping{description:``}<tool|>",
            ),
            (
                "empty properties map and no type",
                tool("e", "E", json!({"properties": {}})),
                "<|tool>declaration:e{description:`E`,parameters:{}}<tool|>",
            ),
            (
                "enum on strings only, numbers and nulls as %v",
                tool("m", "M", json!({"type": "object", "properties": {
                    "mode": {"type": "string", "enum": ["fast", 2, 1.5, null, 1000000]},
                    "level": {"type": "integer", "enum": [1, 2]}}})),
                "<|tool>declaration:m{description:`M`,parameters:{properties:{level:{type:`INTEGER`},mode:{enum:[`fast`,`2`,`1.5`,`<nil>`,`1e+06`],type:`STRING`}},type:`OBJECT`}}<tool|>",
            ),
            (
                "union type stringified, anyOf lowered, complex anyOf dropped",
                tool("u", "U", json!({"type": "object", "properties": {
                    "a": {"type": ["string", "null"], "description": "A"},
                    "b": {"anyOf": [{"type": "string"}, {"type": ["number", "string"]}]},
                    "c": {"anyOf": [{"type": "string", "description": "x"}, {"type": "number"}]}}})),
                "<|tool>declaration:u{description:`U`,parameters:{properties:{a:{description:`A`,type:`['STRING', 'NULL']`},b:{type:`['STRING', 'NUMBER']`},c:{}},type:`OBJECT`}}<tool|>",
            ),
            (
                "keyword-named properties are skipped",
                tool("k", "K", json!({"type": "object", "properties": {
                    "type": {"type": "string"}, "name": {"type": "string"}, "nullable": {"type": "boolean"}}})),
                "<|tool>declaration:k{description:`K`,parameters:{properties:{name:{type:`STRING`}},type:`OBJECT`}}<tool|>",
            ),
            (
                "nested object with required; object without properties",
                tool("o", "O", json!({"type": "object", "properties": {
                    "profile": {"type": "object", "description": "P", "required": ["name"], "properties": {
                        "name": {"type": "string"}, "tags": {"type": ["array", "null"]}}},
                    "config": {"type": "object"}}})),
                "<|tool>declaration:o{description:`O`,parameters:{properties:{config:{properties:{},type:`OBJECT`},profile:{description:`P`,properties:{name:{type:`STRING`},tags:{type:`['ARRAY', 'NULL']`}},required:[`name`],type:`OBJECT`}},type:`OBJECT`}}<tool|>",
            ),
            (
                "array items: raw keys sorted, nested objects, unions, nullable, extra keys",
                tool("b", "B", json!({"type": "object", "properties": {
                    "list": {"type": "array", "items": {
                        "type": "object", "required": ["id"], "additionalProperties": false,
                        "default": {"mode": "auto", "n": 2}, "nullable": true, "skip": null,
                        "properties": {
                            "id": {"type": "string", "description": "ID", "nullable": true},
                            "vals": {"type": "array", "items": {"type": ["string", "null"]}},
                            "meta": {"type": "object", "nullable": true, "properties": {"t": {"type": "string"}}}}}},
                    "plain": {"type": "array"},
                    "odd": {"type": "array", "items": {"type": 5, "enum": ["x", 1.5]}}}})),
                "<|tool>declaration:b{description:`B`,parameters:{properties:{list:{items:{additionalProperties:false,default:{`mode`:`auto`,`n`:2},nullable:true,properties:{id:{description:`ID`,nullable:true,type:`STRING`},meta:{nullable:true,properties:{t:{type:`STRING`}},type:`OBJECT`},vals:{items:{type:[`STRING`,`NULL`]},type:`ARRAY`}},required:[`id`],type:`OBJECT`},type:`ARRAY`},odd:{items:{enum:[`x`,1.5],},type:`ARRAY`},plain:{type:`ARRAY`}},type:`OBJECT`}}<tool|>",
            ),
            (
                "object without properties lists its own map entries (items here)",
                tool("w", "W", json!({"type": "object", "properties": {
                    "o": {"type": "object", "items": {"type": "string", "description": "I"}}}})),
                "<|tool>declaration:w{description:`W`,parameters:{properties:{o:{properties:{items:{description:`I`,type:`STRING`}},type:`OBJECT`}},type:`OBJECT`}}<tool|>",
            ),
            (
                "top-level keys outside api.ToolProperty are dropped",
                tool("d", "D", json!({"type": "object", "properties": {
                    "x": {"type": "string", "nullable": true, "default": "a"}}})),
                "<|tool>declaration:d{description:`D`,parameters:{properties:{x:{type:`STRING`}},type:`OBJECT`}}<tool|>",
            ),
        ];
        for (name, t, want) in cases {
            assert_eq!(declaration(&t), q(want), "{name}");
        }
    }

    #[test]
    fn argument_values() {
        let cases = [
            (json!(null), "null"),
            (json!(true), "true"),
            (json!("a \"b\" <c>"), "`a \"b\" <c>`"),
            (json!(5432), "5432"),
            (json!(3.0), "3"),
            (json!(2.75), "2.75"),
            (json!(-0.0), "0"),
            (json!(1e20), "1e+20"),
            (json!(12345678901234567890u64), "1.2345678901234567e+19"),
            (json!(0.00001), "1e-05"),
            (json!([1, "a", true, null]), "[1,`a`,true,null]"),
            (
                json!({"z": 1, "a": {"y": "v", "b": [2.5]}}),
                "{a:{b:[2.5],y:`v`},z:1}",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(arg_value(&v), q(want), "{v}");
        }
    }

    #[test]
    fn go_upper_keeps_multi_rune_mappings() {
        assert_eq!(go_upper("straße ǆ"), "STRAßE Ǆ");
    }
}
