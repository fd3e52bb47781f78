//! How Ollama's Nemotron 3 renderer (`nemotron-3-nano`, `nemotron-3.5-nano`) prints tools and
//! values: the `# Tools` block with one XML-ish `<function>` per tool, and the two value printers
//! its chat template implies — `pythonJSON` (JSON with `", "`/`": "` separators and Go-quoted
//! strings) and `templateValue` (Python's `str()` for scalars: `True`, `False`, `None`, Go's
//! `%v` for numbers; `pythonJSON` for containers).
//!
//! Every value arrives as the client sent it and is first read the way Go decodes it: tool
//! properties in the client's order with `api.ToolProperty`'s field order ([`json::property`]),
//! free-form `any` values (`items`, `$defs`, `enum`, call arguments) with sorted map keys and
//! float64 numbers ([`json::any`]).

use serde_json::Value as J;

use super::json;
use crate::prompt::gotmpl::format_float_g;

const FORMAT: &str = "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

/// The system message's tool section.
pub fn tools_block(tools: &[J]) -> String {
    let mut out = String::from("# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for t in tools {
        let t = json::tool(t);
        let f = &t["function"];
        out.push_str(&format!("\n<function>\n<name>{}</name>", text(f, "name")));
        if let Some(d) = f.get("description").and_then(J::as_str) {
            out.push_str(&format!("\n<description>{}</description>", d.trim()));
        }
        out.push_str("\n<parameters>");
        let params = &f["parameters"];
        if let Some(props) = params["properties"].as_object() {
            for (name, p) in props {
                out.push_str(&format!("\n<parameter>\n<name>{name}</name>"));
                property_keys(&mut out, p);
                out.push_str("\n</parameter>");
            }
        }
        for key in ["$defs", "items"] {
            if let Some(v) = params.get(key) {
                out.push_str(&format!("\n<{key}>{}</{key}>", template_value(v)));
            }
        }
        if let Some(r) = params.get("required") {
            out.push_str(&format!("\n<required>{}</required>", py_json(r)));
        }
        out.push_str("\n</parameters>\n</function>");
    }
    out.push_str("\n</tools>");
    out.push_str(FORMAT);
    out
}

/// One parameter's lines after its name; `p` is an `api.ToolProperty` as [`json::property`]
/// prints it (empty fields already omitted).
fn property_keys(out: &mut String, p: &J) {
    match p.get("type") {
        Some(J::String(s)) => out.push_str(&format!("\n<type>{s}</type>")),
        Some(J::Array(a)) => {
            let quoted: Vec<String> = a
                .iter()
                .map(|t| format!("'{}'", t.as_str().unwrap_or("")))
                .collect();
            out.push_str(&format!("\n<type>[{}]</type>", quoted.join(", ")));
        }
        _ => {}
    }
    if let Some(d) = p.get("description").and_then(J::as_str) {
        out.push_str(&format!("\n<description>{}</description>", d.trim()));
    }
    for key in ["enum", "anyOf", "items", "properties", "required"] {
        if let Some(v) = p.get(key) {
            out.push_str(&format!("\n<{key}>{}</{key}>", py_json(v)));
        }
    }
}

/// A tool call argument (or a free-form schema value) as the template prints it: Python's
/// `str()` of scalars, [`py_json`] of containers. `v` is the client's value.
pub fn arg_value(v: &J) -> String {
    template_value(&json::any(v))
}

/// Ollama's `templateValue` of an already Go-decoded value.
fn template_value(v: &J) -> String {
    match v {
        J::Null => "None".into(),
        J::Bool(true) => "True".into(),
        J::Bool(false) => "False".into(),
        J::Number(n) => format_float_g(n.as_f64().unwrap_or(0.0)),
        J::String(s) => s.clone(),
        J::Array(_) | J::Object(_) => py_json(v),
    }
}

/// Ollama's `pythonJSON`: JSON with `", "` and `": "` separators, strings quoted by Go's
/// `strconv.Quote`, numbers as Go's `json.Marshal` prints them, objects in the order given.
pub fn py_json(v: &J) -> String {
    match v {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::Number(_) => json::go(v),
        J::String(s) => go_quote(s),
        J::Array(a) => format!("[{}]", a.iter().map(py_json).collect::<Vec<_>>().join(", ")),
        J::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", go_quote(k), py_json(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Go's `strconv.Quote`: `\a \b \f \n \r \t \v \\ \"` escapes, `\xNN` for other ASCII controls,
/// `\uNNNN`/`\UNNNNNNNN` for what `strconv.IsPrint` rejects (controls, separators other than the
/// ASCII space, format characters, private use; unassigned code points are not tabulated and
/// print as themselves).
pub fn go_quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\x07' => o.push_str("\\a"),
            '\x08' => o.push_str("\\b"),
            '\x0c' => o.push_str("\\f"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '\x0b' => o.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => o.push_str(&format!("\\x{:02x}", c as u32)),
            c if !is_print(c) && (c as u32) < 0x10000 => {
                o.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if !is_print(c) => o.push_str(&format!("\\U{:08x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `strconv.IsPrint` for assigned characters: everything but controls, the non-ASCII space
/// separators, line/paragraph separators, format characters and private use.
fn is_print(c: char) -> bool {
    let u = c as u32;
    let not = matches!(u,
        0x00..=0x1f | 0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2 | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
        | 0xd800..=0xf8ff | 0xfeff | 0xfff9..=0xfffb
        | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff);
    !not
}

fn text(v: &J, key: &str) -> String {
    v.get(key).and_then(J::as_str).unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_the_template_does() {
        let cases = [
            (json!(null), "None"),
            (json!(true), "True"),
            (json!(false), "False"),
            (json!(7), "7"),
            (json!(2.0), "2"),
            (json!(0.125), "0.125"),
            (json!(1000000), "1e+06"),
            (json!(9007199254740993_i64), "9.007199254740992e+15"),
            (json!(""), ""),
            (json!("a \"b\"\n"), "a \"b\"\n"),
            (json!({"k": true, "a": "x"}), r#"{"a": "x", "k": true}"#),
            (
                json!([1, "two", false, null, 1.5]),
                r#"[1, "two", false, null, 1.5]"#,
            ),
            (json!({}), "{}"),
            (json!([]), "[]"),
            (
                json!({"s": "q\"uote", "n": 1e21}),
                r#"{"n": 1e+21, "s": "q\"uote"}"#,
            ),
        ];
        for (v, want) in cases {
            assert_eq!(arg_value(&v), want, "{v}");
        }
    }

    #[test]
    fn go_quote_escapes_what_strconv_does() {
        let cases = [
            ("plain <b>&", "\"plain <b>&\""),
            (
                "tab\tnl\nbell\x07\x01\x7f",
                "\"tab\\tnl\\nbell\\a\\x01\\x7f\"",
            ),
            ("é 日本 😀", "\"é 日本 😀\""),
            (
                "\u{a0}\u{ad}\u{2028}\u{200b}\u{feff}",
                "\"\\u00a0\\u00ad\\u2028\\u200b\\ufeff\"",
            ),
            ("\u{85}", "\"\\u0085\""),
            ("\u{e0001}\u{10fffd}", "\"\\U000e0001\\U0010fffd\""),
            ("back\\slash", "\"back\\\\slash\""),
        ];
        for (s, want) in cases {
            assert_eq!(go_quote(s), want, "{s:?}");
        }
    }

    #[test]
    fn tool_block_covers_every_schema_key() {
        let tool = json!({"type": "function", "function": {
        "name": "search_docs", "description": "  Search docs \n",
        "parameters": {"type": "object", "required": ["query"],
            "$defs": {"shared": {"type": "string"}},
            "items": "x",
            "properties": {
                "query": {"type": "string", "description": "Search query", "enum": ["api", "cli"]},
                "mode": {"type": ["string", "null"], "description": "Mode",
                    "anyOf": [{"type": "string"}, {"type": "number"}]},
                "payload": {"type": "object", "description": "Payload",
                    "properties": {"enabled": {"type": "boolean"}}, "required": ["enabled"]},
                "tags": {"type": "array", "description": "Tags", "items": {"type": "string", "minItems": 1}},
                "bare": {"description": "no type"}
            }}}});
        let got = tools_block(&[
            tool,
            json!({"type": "function", "function": {"name": "now"}}),
        ]);
        let want = "# Tools\n\nYou have access to the following functions:\n\n<tools>\n<function>\n<name>search_docs</name>\n<description>Search docs</description>\n<parameters>\n<parameter>\n<name>query</name>\n<type>string</type>\n<description>Search query</description>\n<enum>[\"api\", \"cli\"]</enum>\n</parameter>\n<parameter>\n<name>mode</name>\n<type>['string', 'null']</type>\n<description>Mode</description>\n<anyOf>[{\"type\": \"string\"}, {\"type\": \"number\"}]</anyOf>\n</parameter>\n<parameter>\n<name>payload</name>\n<type>object</type>\n<description>Payload</description>\n<properties>{\"enabled\": {\"type\": \"boolean\"}}</properties>\n<required>[\"enabled\"]</required>\n</parameter>\n<parameter>\n<name>tags</name>\n<type>array</type>\n<description>Tags</description>\n<items>{\"minItems\": 1, \"type\": \"string\"}</items>\n</parameter>\n<parameter>\n<name>bare</name>\n<description>no type</description>\n</parameter>\n<$defs>{\"shared\": {\"type\": \"string\"}}</$defs>\n<items>x</items>\n<required>[\"query\"]</required>\n</parameters>\n</function>\n<function>\n<name>now</name>\n<parameters>\n</parameters>\n</function>\n</tools>";
        assert_eq!(got, format!("{want}{FORMAT}"));
    }

    #[test]
    fn nested_property_keeps_tool_property_field_order() {
        // anyOf, type, items, description, enum, properties, required — whatever the client's
        // order; nested properties keep the client's order.
        let tool = json!({"type": "function", "function": {"name": "deep", "parameters": {
            "type": "object", "properties": {"outer": {
                "required": ["inner"], "description": "Outer object", "enum": ["a", "b"],
                "properties": {"inner": {"description": "Inner", "type": "string"},
                               "flag": {"type": ["boolean", "null"]}},
                "items": {"type": "integer"}, "type": "object"}}}}});
        let got = tools_block(&[tool]);
        assert!(got.contains("<name>outer</name>\n<type>object</type>\n<description>Outer object</description>\n<enum>[\"a\", \"b\"]</enum>\n<items>{\"type\": \"integer\"}</items>\n<properties>{\"inner\": {\"type\": \"string\", \"description\": \"Inner\"}, \"flag\": {\"type\": [\"boolean\", \"null\"]}}</properties>\n<required>[\"inner\"]</required>\n</parameter>"), "{got}");
    }
}
