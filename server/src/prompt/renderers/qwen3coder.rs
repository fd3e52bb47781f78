//! The `qwen3-coder` renderer (Ollama's `Qwen3CoderRenderer`, Qwen3-Coder models on ollama.com):
//! ChatML turns with the tools listed as XML-ish `<function>` blocks in the system turn and the
//! assistant's calls written as `<tool_call><function=…><parameter=…>` blocks, the format the
//! `qwen3-coder` parser reads back.
//!
//! Rules (Ollama's, reproduced byte for byte):
//! - system messages are lifted out of the conversation; the first non-empty one is the system
//!   turn. With tools but no system text a default system line is used; `think` is ignored and
//!   images are not marked.
//! - each tool property prints its name, its type (one type bare, several as a JSON array),
//!   its description, then every other field Ollama keeps for a property (`anyOf`, `items`,
//!   `enum`, `properties`, `required`) as `<key>value</key>`: maps and arrays as compact Go JSON
//!   (keys sorted), scalars as Go's `%v`. The parameters object adds its `$defs`, `items` and
//!   `required` the same way. Ollama walks a Go map for those extra fields, so their order varies
//!   between its runs; herd prints them in the order the client sent them, which is the order the
//!   model's reference template uses.
//! - call arguments print as strings bare, maps and arrays as compact JSON, numbers and booleans
//!   as Go's `%v` of the float64/bool Ollama decoded (`1e+06`), null as `null`.
//! - consecutive tool results share one user turn; a final assistant message without tool calls
//!   is continued (no end tag, no new assistant turn); one with tool calls is closed.

use serde_json::Value as J;

use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::gotmpl::format_float_g;
use crate::prompt::{Message, Think};

/// `qwen3-coder`.
pub struct Qwen3Coder;

const DEFAULT_SYSTEM: &str =
    "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.";

const TOOLS_HEADER: &str = "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>";

const TOOLS_FOOTER: &str = "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

impl Renderer for Qwen3Coder {
    fn render(&self, messages: &[Message], tools: &[J], _think: Option<&Think>) -> Result<String> {
        let mut system = "";
        let mut turns: Vec<&Message> = Vec::with_capacity(messages.len());
        for m in messages {
            if m.role != "system" {
                turns.push(m);
            } else if system.is_empty() {
                system = &m.content;
            }
        }

        let mut out = String::new();
        if !system.is_empty() || !tools.is_empty() {
            out.push_str("<|im_start|>system\n");
            out.push_str(if system.is_empty() {
                DEFAULT_SYSTEM
            } else {
                system
            });
            if !tools.is_empty() {
                out.push_str(TOOLS_HEADER);
                for t in tools {
                    write_tool(&mut out, t);
                }
                out.push_str(TOOLS_FOOTER);
            }
            out.push_str("<|im_end|>\n");
        }

        for (i, m) in turns.iter().enumerate() {
            let last = i + 1 == turns.len();
            let prefill = last && m.role == "assistant";
            match m.role.as_str() {
                "assistant" if !m.tool_calls.is_empty() => {
                    out.push_str("<|im_start|>assistant\n");
                    if !m.content.is_empty() {
                        out.push_str(&m.content);
                        out.push('\n');
                    }
                    for c in &m.tool_calls {
                        out.push_str("\n<tool_call>\n<function=");
                        out.push_str(&c.name);
                        out.push('>');
                        for (name, value) in &c.arguments {
                            out.push_str("\n<parameter=");
                            out.push_str(name);
                            out.push_str(">\n");
                            out.push_str(&argument(value));
                            out.push_str("\n</parameter>");
                        }
                        out.push_str("\n</function>\n</tool_call>");
                    }
                    out.push_str("<|im_end|>\n");
                }
                "assistant" => {
                    out.push_str("<|im_start|>assistant\n");
                    out.push_str(&m.content);
                    if !prefill {
                        out.push_str("<|im_end|>\n");
                    }
                }
                "tool" => {
                    if i == 0 || turns[i - 1].role != "tool" {
                        out.push_str("<|im_start|>user");
                    }
                    out.push_str("\n<tool_response>\n");
                    out.push_str(&m.content);
                    out.push_str("\n</tool_response>");
                    if last || turns[i + 1].role != "tool" {
                        out.push_str("<|im_end|>\n");
                    }
                }
                role => {
                    out.push_str("<|im_start|>");
                    out.push_str(role);
                    out.push('\n');
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
            }
            if last && !prefill {
                out.push_str("<|im_start|>assistant\n");
            }
        }
        Ok(out)
    }
}

/// One `<function>` block of the tools list.
fn write_tool(out: &mut String, t: &J) {
    let f = t.get("function").unwrap_or(&J::Null);
    let text = |v: &J, k: &str| v.get(k).and_then(J::as_str).unwrap_or("").to_string();
    out.push_str("\n<function>\n<name>");
    out.push_str(&text(f, "name"));
    out.push_str("</name>");
    let desc = text(f, "description");
    if !desc.is_empty() {
        out.push_str("\n<description>");
        out.push_str(&desc);
        out.push_str("</description>");
    }
    out.push_str("\n<parameters>");
    let params = f.get("parameters").unwrap_or(&J::Null);
    if let Some(props) = params.get("properties").and_then(J::as_object) {
        for (name, p) in props {
            out.push_str("\n<parameter>\n<name>");
            out.push_str(name);
            out.push_str("</name>");
            let types = type_names(p);
            if !types.is_empty() {
                out.push_str("\n<type>");
                out.push_str(&definition_type(&types));
                out.push_str("</type>");
            }
            let desc = text(p, "description");
            if !desc.is_empty() {
                out.push_str("\n<description>");
                out.push_str(&desc);
                out.push_str("</description>");
            }
            extra_keys(out, &json::property(p), p, &["type", "description"]);
            out.push_str("\n</parameter>");
        }
    }
    // The parameters object as Ollama's `ToolFunctionParameters` prints it.
    let printed = json::tool(t);
    let printed = printed.pointer("/function/parameters").unwrap_or(&J::Null);
    extra_keys(out, printed, params, &["type", "properties"]);
    out.push_str("\n</parameters>\n</function>");
}

/// A property's `type` as Ollama's `PropertyType` holds it (a string is one type).
pub(crate) fn type_names(p: &J) -> Vec<String> {
    match p.get("type") {
        Some(J::String(s)) => vec![s.clone()],
        // Go's `PropertyType` decodes `null` as one empty type name.
        Some(J::Null) => vec![String::new()],
        Some(J::Array(a)) => a
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// `formatToolDefinitionType`: one type bare, several as a compact JSON array.
fn definition_type(types: &[String]) -> String {
    match types {
        [one] => one.clone(),
        _ => json::go(&J::Array(
            types.iter().map(|t| J::String(t.clone())).collect(),
        )),
    }
}

/// Ollama's `renderAdditionalKeys`: every field of the printed Go value except `handled`, as
/// `\n<key>value</key>` (null fields skipped), in the client's key order (see the module notes).
fn extra_keys(out: &mut String, printed: &J, client: &J, handled: &[&str]) {
    let Some(printed) = printed.as_object() else {
        return;
    };
    let mut keys: Vec<&String> = Vec::with_capacity(printed.len());
    if let Some(c) = client.as_object() {
        keys.extend(c.keys().filter(|k| printed.contains_key(*k)));
    }
    for k in printed.keys() {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for key in keys {
        if handled.contains(&key.as_str()) {
            continue;
        }
        // Ollama prints the struct, decodes it into a map and prints each value again: nested
        // maps come out with sorted keys and numbers as float64.
        let text = match json::any(&printed[key.as_str()]) {
            J::Null => continue,
            v @ (J::Object(_) | J::Array(_)) => json::go(&v),
            v => scalar(&v),
        };
        out.push_str("\n<");
        out.push_str(key);
        out.push('>');
        out.push_str(&text);
        out.push_str("</");
        out.push_str(key);
        out.push('>');
    }
}

/// Go's `%v` of a decoded JSON scalar (strings bare, numbers as float64).
fn scalar(v: &J) -> String {
    match v {
        J::String(s) => s.clone(),
        J::Number(n) => format_float_g(n.as_f64().unwrap_or(0.0)),
        J::Bool(b) => b.to_string(),
        J::Null => "null".into(),
        v => json::go(v),
    }
}

/// `formatToolCallArgument`: strings bare, maps and arrays as compact JSON, the rest as `%v`.
fn argument(v: &J) -> String {
    match v {
        J::Object(_) | J::Array(_) => json::go(&json::any(v)),
        v => scalar(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{call, m as msg, with_calls};
    use serde_json::json;

    fn render(msgs: &[Message], tools: &[J]) -> String {
        Qwen3Coder.render(msgs, tools, None).unwrap()
    }

    const SYS: &str = "<|im_start|>system\nBe brief.<|im_end|>\n";

    #[test]
    fn conversations_render_as_chatml() {
        let cases: Vec<(&str, Vec<Message>, String)> = vec![
            ("empty", vec![], String::new()),
            (
                "user only: no system turn",
                vec![msg("user", "Hi")],
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n".into(),
            ),
            (
                "first non-empty system wins, wherever it is",
                vec![
                    msg("system", ""),
                    msg("user", "Hi"),
                    msg("system", "Be brief."),
                    msg("system", "Ignored."),
                ],
                format!("{SYS}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "other roles keep their name",
                vec![msg("developer", "Rules"), msg("user", "Hi")],
                "<|im_start|>developer\nRules<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n".into(),
            ),
            (
                "prefill: the last assistant message is continued",
                vec![msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hel")],
                format!("{SYS}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel"),
            ),
            (
                "earlier assistant turns are closed",
                vec![msg("user", "a"), msg("assistant", ""), msg("user", "b")],
                "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n".into(),
            ),
            (
                "tool results share one user turn",
                vec![
                    msg("user", "go"),
                    with_calls("", vec![call("f", json!({})), call("g", json!({}))]),
                    msg("tool", "1"),
                    msg("tool", "2"),
                    msg("user", "ok"),
                    msg("tool", "3"),
                ],
                "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n".into(),
            ),
            (
                "a final assistant message with calls is closed and not continued",
                vec![msg("user", "go"), with_calls("Sure.", vec![call("f", json!({"a": "x"}))])],
                "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\nSure.\n\n<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</function>\n</tool_call><|im_end|>\n".into(),
            ),
        ];
        for (name, msgs, want) in cases {
            assert_eq!(render(&msgs, &[]), want, "{name}");
        }
    }

    #[test]
    fn think_and_images_do_not_change_the_prompt() {
        let mut m = msg("user", "What is this?");
        m.images = 2;
        let on = Think::Bool(true);
        let got = Qwen3Coder.render(&[m], &[], Some(&on)).unwrap();
        assert_eq!(
            got,
            "<|im_start|>user\nWhat is this?<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(Qwen3Coder.leading_bos(), "");
    }

    #[test]
    fn arguments_print_as_go_values() {
        let c = call(
            "write",
            json!({"path": "/tmp/a <b>", "count": 1000000, "ratio": 2.5, "small": 0.00001,
                   "ok": true, "none": null, "meta": {"b": 1, "a": "<x>"}, "list": [1, "two", 3.0]}),
        );
        let got = render(
            &[
                msg("user", "go"),
                with_calls("", vec![c]),
                msg("tool", "done"),
            ],
            &[],
        );
        let want = "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n<function=write>\n<parameter=path>\n/tmp/a <b>\n</parameter>\n<parameter=count>\n1e+06\n</parameter>\n<parameter=ratio>\n2.5\n</parameter>\n<parameter=small>\n1e-05\n</parameter>\n<parameter=ok>\ntrue\n</parameter>\n<parameter=none>\nnull\n</parameter>\n<parameter=meta>\n{\"a\":\"\\u003cx\\u003e\",\"b\":1}\n</parameter>\n<parameter=list>\n[1,\"two\",3]\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
    }

    #[test]
    fn tools_without_system_get_the_default_system_line() {
        let tool = json!({"type": "function", "function": {"name": "get_weather",
            "description": "Get the weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {
                "city": {"type": "string", "description": "City name"}}}}});
        let want = "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n<function>\n<name>get_weather</name>\n<description>Get the weather</description>\n<parameters>\n<parameter>\n<name>city</name>\n<type>string</type>\n<description>City name</description>\n</parameter>\n<required>[\"city\"]</required>\n</parameters>\n</function>\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT><|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(render(&[msg("user", "Weather?")], &[tool]), want);
    }

    #[test]
    fn tool_definitions_print_every_field_ollama_keeps() {
        let tools = [
            json!({"type": "function", "function": {"name": "read",
                "parameters": {"type": "object", "required": ["path"], "$defs": {"b": 1, "a": [true]},
                    "properties": {
                        "path": {"type": "string", "description": "File <path>", "minLength": 1},
                        "mode": {"enum": ["<r>", 1.5], "type": ["string", "null"]},
                        "opts": {"type": "object", "properties": {"z": {"type": "integer"},
                            "a": {"description": "d", "type": "string"}}, "required": ["z"]},
                        "tags": {"items": {"type": "string"}, "type": "array", "description": ""},
                        "k": {"items": 1000000},
                        "u": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        "e": {"type": []},
                        "blank": {"type": ""}}}}}),
            json!({"type": "function", "function": {"name": "ping"}}),
        ];
        let body = "\n<function>\n<name>read</name>\n<parameters>\
             \n<parameter>\n<name>path</name>\n<type>string</type>\n<description>File <path></description>\n</parameter>\
             \n<parameter>\n<name>mode</name>\n<type>[\"string\",\"null\"]</type>\n<enum>[\"\\u003cr\\u003e\",1.5]</enum>\n</parameter>\
             \n<parameter>\n<name>opts</name>\n<type>object</type>\n<properties>{\"a\":{\"description\":\"d\",\"type\":\"string\"},\"z\":{\"type\":\"integer\"}}</properties>\n<required>[\"z\"]</required>\n</parameter>\
             \n<parameter>\n<name>tags</name>\n<type>array</type>\n<items>{\"type\":\"string\"}</items>\n</parameter>\
             \n<parameter>\n<name>k</name>\n<items>1e+06</items>\n</parameter>\
             \n<parameter>\n<name>u</name>\n<anyOf>[{\"type\":\"string\"},{\"type\":\"null\"}]</anyOf>\n</parameter>\
             \n<parameter>\n<name>e</name>\n</parameter>\
             \n<parameter>\n<name>blank</name>\n<type></type>\n</parameter>\
             \n<required>[\"path\"]</required>\n<$defs>{\"a\":[true],\"b\":1}</$defs>\n</parameters>\n</function>\
             \n<function>\n<name>ping</name>\n<parameters>\n</parameters>\n</function>";
        let want = format!(
            "<|im_start|>system\nBe brief.{TOOLS_HEADER}{body}{TOOLS_FOOTER}<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let got = render(&[msg("system", "Be brief."), msg("user", "Hi")], &tools);
        assert_eq!(got, want);
    }
}
