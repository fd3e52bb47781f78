//! FunctionGemma's chat format, Ollama's `FunctionGemmaRenderer`, for the renderer name
//! `functiongemma`: Gemma 3 turns (`<start_of_turn>ROLE\n…<end_of_turn>\n`, assistant →
//! `model`, system/developer → a `developer` turn) with function declarations
//! (`<start_function_declaration>declaration:NAME{…}<end_function_declaration>`), calls
//! (`<start_function_call>call:NAME{key:value}<end_function_call>`) and responses
//! (`<start_function_response>response:NAME{<escape>…<escape>}<end_function_response>`);
//! strings sit between `<escape>` markers.
//!
//! As in Ollama: a tool message takes its function name from the nearest earlier assistant
//! message with calls, by position (its `tool_name` and `tool_call_id` are not read); a
//! response run keeps the model's turn open, so neither the next message's turn header nor the
//! generation prompt follows it; images are not marked; `think` is ignored.

use serde_json::Value as J;

use super::gemma4_tools::{go_upper, number};
use super::Renderer;
use crate::error::Result;
use crate::prompt::{Message, Think, ToolCall};

/// The developer line that introduces the declarations (not repeated when the system message
/// is exactly it).
const DEFAULT_SYSTEM: &str = "You can do function calling with the following functions:";

pub struct FunctionGemma;

/// What the previous message left open.
#[derive(PartialEq)]
enum Prev {
    Other,
    /// Calls followed by a tool message: `<start_function_response>` is written.
    ToolCall,
    ToolResponse,
}

impl Renderer for FunctionGemma {
    fn leading_bos(&self) -> &'static str {
        "<bos>"
    }

    fn render(&self, messages: &[Message], tools: &[J], _think: Option<&Think>) -> Result<String> {
        let mut out = String::from("<bos>");
        let (system, msgs) = match messages.first() {
            Some(m) if m.role == "system" || m.role == "developer" => {
                (m.content.as_str(), &messages[1..])
            }
            _ => ("", messages),
        };
        if !system.is_empty() || !tools.is_empty() {
            out.push_str("<start_of_turn>developer\n");
            out.push_str(system.trim());
            if !tools.is_empty() {
                if !system.is_empty() {
                    out.push('\n');
                }
                if system.trim() != DEFAULT_SYSTEM {
                    out.push_str(DEFAULT_SYSTEM);
                }
            }
            for t in tools {
                out.push_str(&declaration(t));
            }
            out.push_str("<end_of_turn>\n");
        }

        let mut prev = Prev::Other;
        for (i, m) in msgs.iter().enumerate() {
            match m.role.as_str() {
                "assistant" => {
                    if prev != Prev::ToolResponse {
                        out.push_str("<start_of_turn>model\n");
                    }
                    prev = Prev::Other;
                    out.push_str(m.content.trim());
                    for c in &m.tool_calls {
                        out.push_str(&call(c));
                    }
                    if !m.tool_calls.is_empty() && msgs.get(i + 1).is_some_and(|n| n.role == "tool")
                    {
                        out.push_str("<start_function_response>");
                        prev = Prev::ToolCall;
                    } else {
                        out.push_str("<end_of_turn>\n");
                    }
                }
                "user" => {
                    if prev != Prev::ToolResponse {
                        out.push_str("<start_of_turn>user\n");
                    }
                    prev = Prev::Other;
                    out.push_str(m.content.trim());
                    out.push_str("<end_of_turn>\n");
                }
                "tool" => {
                    if prev != Prev::ToolCall {
                        out.push_str("<start_function_response>");
                    }
                    out.push_str(&format!(
                        "response:{}{{{}}}<end_function_response>",
                        response_name(msgs, i),
                        value(&J::String(m.content.clone()))
                    ));
                    prev = Prev::ToolResponse;
                }
                // Other roles (a later system message) leave `prev` as it was.
                role => {
                    out.push_str(&format!(
                        "<start_of_turn>{role}\n{}<end_of_turn>\n",
                        m.content.trim()
                    ));
                }
            }
        }
        if prev != Prev::ToolResponse {
            out.push_str("<start_of_turn>model\n");
        }
        Ok(out)
    }
}

/// The function of the tool message at `i`: the nearest earlier assistant message with calls,
/// its call at the position of this message among the tool messages since; "" when none.
fn response_name(msgs: &[Message], i: usize) -> &str {
    let Some(j) = msgs[..i]
        .iter()
        .rposition(|m| m.role == "assistant" && !m.tool_calls.is_empty())
    else {
        return "";
    };
    let position = msgs[j + 1..i].iter().filter(|m| m.role == "tool").count();
    msgs[j]
        .tool_calls
        .get(position)
        .map_or("", |c| c.name.as_str())
}

/// `declaration:NAME{description:<escape>…<escape>,parameters:{properties:{…},required:[…],type:…}}`:
/// properties sorted, each with its (possibly empty) description and its first type upper-cased.
fn declaration(tool: &J) -> String {
    let f = tool.get("function").unwrap_or(&J::Null);
    let text = |v: &J, k: &str| v.get(k).and_then(J::as_str).unwrap_or("").to_string();
    let mut s = format!(
        "<start_function_declaration>declaration:{}{{description:<escape>{}<escape>",
        text(f, "name"),
        text(f, "description")
    );
    let p = f.get("parameters").unwrap_or(&J::Null);
    let props = p.get("properties").and_then(J::as_object);
    let ptype = text(p, "type");
    if props.is_some() || !ptype.is_empty() {
        let mut parts = Vec::new();
        if let Some(props) = props.filter(|m| !m.is_empty()) {
            let mut names: Vec<&String> = props.keys().collect();
            names.sort();
            let items: Vec<String> = names
                .into_iter()
                .map(|n| {
                    let prop = &props[n];
                    let first_type = match prop.get("type") {
                        Some(J::String(t)) => Some(t.as_str()),
                        Some(J::Array(a)) => a.first().and_then(J::as_str),
                        _ => None,
                    };
                    let ty = first_type
                        .map(|t| format!(",type:<escape>{}<escape>", go_upper(t)))
                        .unwrap_or_default();
                    format!(
                        "{n}:{{description:<escape>{}<escape>{ty}}}",
                        text(prop, "description")
                    )
                })
                .collect();
            parts.push(format!("properties:{{{}}}", items.join(",")));
        }
        let required: Vec<String> = p
            .get("required")
            .and_then(J::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(J::as_str)
                    .map(|r| format!("<escape>{r}<escape>"))
                    .collect()
            })
            .unwrap_or_default();
        if !required.is_empty() {
            parts.push(format!("required:[{}]", required.join(",")));
        }
        if !ptype.is_empty() {
            parts.push(format!("type:<escape>{}<escape>", go_upper(&ptype)));
        }
        s.push_str(&format!(",parameters:{{{}}}", parts.join(",")));
    }
    s.push_str("}<end_function_declaration>");
    s
}

/// `<start_function_call>call:NAME{key:value,…}<end_function_call>`, keys sorted.
fn call(c: &ToolCall) -> String {
    let mut keys: Vec<&String> = c.arguments.keys().collect();
    keys.sort();
    let args: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{k}:{}", value(&c.arguments[k])))
        .collect();
    format!(
        "<start_function_call>call:{}{{{}}}<end_function_call>",
        c.name,
        args.join(",")
    )
}

/// `formatArgValue`: strings between `<escape>`s, maps with sorted bare keys, a null as Go's
/// `%v` of nil.
fn value(v: &J) -> String {
    match v {
        J::Null => "<nil>".into(),
        J::Bool(b) => b.to_string(),
        J::String(s) => format!("<escape>{s}<escape>"),
        J::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        J::Array(a) => format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(",")),
        J::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", value(&m[k])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::m;
    use serde_json::json;

    fn calls(content: &str, tc: &[(&str, J)]) -> Message {
        Message {
            tool_calls: tc
                .iter()
                .map(|(n, a)| ToolCall {
                    id: format!("id_{n}"),
                    index: 0,
                    name: n.to_string(),
                    arguments: a.as_object().cloned().unwrap_or_default(),
                })
                .collect(),
            ..m("assistant", content)
        }
    }

    fn weather() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "description": "Get weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {
                "city": {"type": "string", "description": "City"},
                "days": {"type": ["integer", "null"]}}}}})
    }

    const DECL: &str = "<start_function_declaration>declaration:get_weather{description:<escape>Get weather<escape>,parameters:{properties:{city:{description:<escape>City<escape>,type:<escape>STRING<escape>},days:{description:<escape><escape>,type:<escape>INTEGER<escape>}},required:[<escape>city<escape>],type:<escape>OBJECT<escape>}}<end_function_declaration>";

    #[test]
    fn renders_as_ollama() {
        let dev = "<start_of_turn>developer\n";
        let cases: Vec<(&str, Vec<Message>, Vec<J>, String)> = vec![
            (
                "user only, thinking ignored",
                vec![m("user", " Hello! ")],
                vec![],
                "<bos><start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n".into(),
            ),
            (
                "system without tools; an empty system opens no turn",
                vec![m("developer", " Be brief. "), m("user", "Hi")],
                vec![],
                format!("<bos>{dev}Be brief.<end_of_turn>\n<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
            ),
            (
                "empty system is dropped",
                vec![m("system", ""), m("user", "Hi")],
                vec![],
                "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n".into(),
            ),
            (
                "tools: default line after the system message",
                vec![m("system", "Weather expert."), m("user", "W?")],
                vec![weather()],
                format!("<bos>{dev}Weather expert.\n{DEFAULT_SYSTEM}{DECL}<end_of_turn>\n<start_of_turn>user\nW?<end_of_turn>\n<start_of_turn>model\n"),
            ),
            (
                "tools: the default line is not repeated",
                vec![m("system", &format!(" {DEFAULT_SYSTEM}\n")), m("user", "W?")],
                vec![weather()],
                format!("<bos>{dev}{DEFAULT_SYSTEM}\n{DECL}<end_of_turn>\n<start_of_turn>user\nW?<end_of_turn>\n<start_of_turn>model\n"),
            ),
            (
                "whitespace system with tools, declarations without parameters",
                vec![m("system", "  "), m("user", "x")],
                vec![json!({"type": "function", "function": {"name": "ping"}}), json!({"function": {"name": "raw", "description": "R", "parameters": {"type": "object", "properties": {}}}})],
                format!("<bos>{dev}\n{DEFAULT_SYSTEM}<start_function_declaration>declaration:ping{{description:<escape><escape>}}<end_function_declaration><start_function_declaration>declaration:raw{{description:<escape>R<escape>,parameters:{{type:<escape>OBJECT<escape>}}}}<end_function_declaration><end_of_turn>\n<start_of_turn>user\nx<end_of_turn>\n<start_of_turn>model\n"),
            ),
            (
                "calls answered, named by position; responses keep the turn open",
                vec![
                    m("user", "W?"),
                    calls(" Checking. ", &[("get_weather", json!({"city": "Paris", "days": 2.0})), ("get_time", json!({}))]),
                    Message { tool_name: Some("ignored".into()), ..m("tool", " Sunny ") },
                    m("tool", "12:00"),
                    m("tool", "extra"),
                    m("user", "Thanks"),
                ],
                vec![],
                "<bos><start_of_turn>user\nW?<end_of_turn>\n<start_of_turn>model\nChecking.<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:2}<end_function_call><start_function_call>call:get_time{}<end_function_call><start_function_response>response:get_weather{<escape> Sunny <escape>}<end_function_response><start_function_response>response:get_time{<escape>12:00<escape>}<end_function_response><start_function_response>response:{<escape>extra<escape>}<end_function_response>Thanks<end_of_turn>\n<start_of_turn>model\n".into(),
            ),
            (
                "ending on a response writes no generation prompt",
                vec![m("user", "Go"), calls("", &[("f", json!({"a": {"z": null, "b": [1.5, "s", true]}}))]), m("tool", "ok")],
                vec![],
                "<bos><start_of_turn>user\nGo<end_of_turn>\n<start_of_turn>model\n<start_function_call>call:f{a:{b:[1.5,<escape>s<escape>,true],z:<nil>}}<end_function_call><start_function_response>response:f{<escape>ok<escape>}<end_function_response>".into(),
            ),
            (
                "unanswered calls close the turn; an assistant after a response continues it",
                vec![
                    m("user", "Go"),
                    calls("", &[("f", json!({}))]),
                    m("user", "No"),
                    calls("", &[("g", json!({}))]),
                    m("tool", "done"),
                    m("assistant", "All done."),
                ],
                vec![],
                "<bos><start_of_turn>user\nGo<end_of_turn>\n<start_of_turn>model\n<start_function_call>call:f{}<end_function_call><end_of_turn>\n<start_of_turn>user\nNo<end_of_turn>\n<start_of_turn>model\n<start_function_call>call:g{}<end_function_call><start_function_response>response:g{<escape>done<escape>}<end_function_response>All done.<end_of_turn>\n<start_of_turn>model\n".into(),
            ),
            (
                "stray tool message and other roles",
                vec![m("tool", "orphan"), m("system", " late "), m("user", "u")],
                vec![],
                "<bos><start_function_response>response:{<escape>orphan<escape>}<end_function_response><start_of_turn>system\nlate<end_of_turn>\nu<end_of_turn>\n<start_of_turn>model\n".into(),
            ),
        ];
        for (name, msgs, tools, want) in cases {
            let got = FunctionGemma
                .render(&msgs, &tools, Some(&Think::Bool(true)))
                .unwrap();
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(FunctionGemma.leading_bos(), "<bos>");
    }
}
