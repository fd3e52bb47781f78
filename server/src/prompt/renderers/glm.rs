//! Zhipu GLM prompt formats: `glm-4.7` (Ollama's `GLM47Renderer`) and `glm-ocr`
//! (`GlmOcrRenderer`). Both begin with `[gMASK]<sop>`, list the tools as Go's `json.Marshal` with
//! a space after every `:` and `,` (`formatGLM47ToolJSON`), and write calls as
//! `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>` (string values raw,
//! others as JSON).
//!
//! - `glm-4.7`: no newlines between turns; every assistant turn keeps its thinking
//!   (`<think>…</think>`, or a bare `</think>`); the generation prompt opens `<think>` unless the
//!   request turns thinking off (unset is on). Images are not marked.
//! - `glm-ocr`: a newline after each role tag; thinking and content are trimmed; images become
//!   `[img-N]` tags in user and tool turns; `think: false` appends `/nothink` to user turns and
//!   closes an empty `<think></think>` after the generation prompt.

use serde_json::Value as J;

use super::{image_tags, json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think, ToolCall};

/// `glm-4.7`.
pub struct Glm47;

/// `glm-ocr`.
pub struct GlmOcr;

impl Renderer for Glm47 {
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let mut out = String::from("[gMASK]<sop>");
        tools_block(&mut out, tools);
        for (i, m) in messages.iter().enumerate() {
            match m.role.as_str() {
                "user" => {
                    out.push_str("<|user|>");
                    out.push_str(&m.content);
                }
                "assistant" => {
                    out.push_str("<|assistant|>");
                    match m.thinking.as_deref().filter(|t| !t.is_empty()) {
                        Some(t) => {
                            out.push_str("<think>");
                            out.push_str(t);
                            out.push_str("</think>");
                        }
                        None => out.push_str("</think>"),
                    }
                    out.push_str(&m.content);
                    for c in &m.tool_calls {
                        call(&mut out, c);
                    }
                }
                "tool" => {
                    if i == 0 || messages[i - 1].role != "tool" {
                        out.push_str("<|observation|>");
                    }
                    out.push_str("<tool_response>");
                    out.push_str(&m.content);
                    out.push_str("</tool_response>");
                }
                "system" => {
                    out.push_str("<|system|>");
                    out.push_str(&m.content);
                }
                _ => {}
            }
        }
        out.push_str("<|assistant|>");
        let off = think.is_some_and(|t| !t.enabled());
        out.push_str(if off { "</think>" } else { "<think>" });
        Ok(out)
    }
}

impl Renderer for GlmOcr {
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let mut out = String::from("[gMASK]<sop>");
        tools_block(&mut out, tools);
        // Only an explicit `think: false` (or an unknown level) turns thinking off.
        let off = think.is_some_and(|t| !t.enabled());
        let mut offset = 0;
        for (i, m) in messages.iter().enumerate() {
            match m.role.as_str() {
                "user" => {
                    out.push_str("<|user|>\n");
                    let (content, next) = image_tags(&m.content, m.images, offset);
                    offset = next;
                    out.push_str(&content);
                    if off && !m.content.ends_with("/nothink") {
                        out.push_str("/nothink");
                    }
                }
                "assistant" => {
                    out.push_str("<|assistant|>\n<think>");
                    out.push_str(m.thinking.as_deref().unwrap_or("").trim());
                    out.push_str("</think>");
                    if !m.content.is_empty() {
                        out.push('\n');
                        out.push_str(m.content.trim());
                    }
                    for c in &m.tool_calls {
                        out.push('\n');
                        call(&mut out, c);
                    }
                    out.push('\n');
                }
                "tool" => {
                    if i == 0 || messages[i - 1].role != "tool" {
                        out.push_str("<|observation|>");
                    }
                    let (content, next) = image_tags(&m.content, m.images, offset);
                    offset = next;
                    out.push_str("\n<tool_response>\n");
                    out.push_str(&content);
                    out.push_str("\n</tool_response>\n");
                }
                "system" => {
                    out.push_str("<|system|>\n");
                    out.push_str(&m.content);
                    out.push('\n');
                }
                _ => {}
            }
        }
        out.push_str("<|assistant|>\n");
        if off {
            out.push_str("<think></think>\n");
        }
        Ok(out)
    }
}

/// The `# Tools` system block both formats share (nothing without tools).
fn tools_block(out: &mut String, tools: &[J]) {
    if tools.is_empty() {
        return;
    }
    out.push_str("<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n");
    out.push_str(
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
    );
    for t in tools {
        out.push_str(&json::with_spaces(&json::go(&json::tool(t))));
        out.push('\n');
    }
    out.push_str("</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n");
    out.push_str("<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>");
}

/// One call: string arguments raw, anything else as Go's `json.Marshal` of the decoded value.
fn call(out: &mut String, c: &ToolCall) {
    out.push_str("<tool_call>");
    out.push_str(&c.name);
    for (k, v) in &c.arguments {
        out.push_str("<arg_key>");
        out.push_str(k);
        out.push_str("</arg_key><arg_value>");
        match v {
            J::String(s) => out.push_str(s),
            v => out.push_str(&json::go(&json::any(v))),
        }
        out.push_str("</arg_value>");
    }
    out.push_str("</tool_call>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{call as tc, m};
    use serde_json::json;

    /// (name, messages, tools, think, expected prompt)
    type Case<'a> = (&'a str, Vec<Message>, Vec<J>, Option<&'a Think>, String);

    fn weather_tool() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "description": "Get weather",
            "parameters": {"type": "object", "required": ["location"],
                "properties": {"location": {"type": "string", "description": "a, b: <c>"}}}}})
    }

    const TOOLS: &str = "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": \"object\", \"required\": [\"location\"], \"properties\": {\"location\": {\"type\": \"string\", \"description\": \"a, b: \\u003cc\\u003e\"}}}}}\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

    fn conversation() -> Vec<Message> {
        vec![
            m("system", "Be kind."),
            Message {
                images: 1,
                ..m("user", "What is in this?")
            },
            Message {
                thinking: Some("  Look.\n".into()),
                tool_calls: vec![tc(
                    "get_weather",
                    json!({"location": "Tokyo", "days": 3, "opts": {"z": true, "a": "<x>"}, "none": null}),
                )],
                ..m("assistant", " Let me check. ")
            },
            Message {
                images: 1,
                ..m("tool", "sunny")
            },
            m("tool", "22C"),
            m("assistant", "Sunny, 22C."),
            m("user", "Thanks/nothink"),
        ]
    }

    #[test]
    fn glm47_turns() {
        let off = Think::Bool(false);
        let cases: Vec<Case> = vec![
            (
                "unset opens thinking",
                vec![m("user", "Hello")],
                vec![],
                None,
                "[gMASK]<sop><|user|>Hello<|assistant|><think>".into(),
            ),
            (
                "off closes it",
                vec![m("user", "Hello")],
                vec![],
                Some(&off),
                "[gMASK]<sop><|user|>Hello<|assistant|></think>".into(),
            ),
            (
                "whole conversation with tools",
                conversation(),
                vec![weather_tool()],
                None,
                format!(
                    "[gMASK]<sop>{TOOLS}<|system|>Be kind.<|user|>What is in this?<|assistant|><think>  Look.\n</think> Let me check. <tool_call>get_weather<arg_key>location</arg_key><arg_value>Tokyo</arg_value><arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{{\"a\":\"\\u003cx\\u003e\",\"z\":true}}</arg_value><arg_key>none</arg_key><arg_value>null</arg_value></tool_call><|observation|><tool_response>sunny</tool_response><tool_response>22C</tool_response><|assistant|></think>Sunny, 22C.<|user|>Thanks/nothink<|assistant|><think>"
                ),
            ),
            (
                "a leading tool result is an observation; other roles print nothing",
                vec![m("tool", "r"), m("developer", "d"), m("tool", "s")],
                vec![],
                Some(&off),
                "[gMASK]<sop><|observation|><tool_response>r</tool_response><|observation|><tool_response>s</tool_response><|assistant|></think>".into(),
            ),
        ];
        for (name, msgs, tools, think, want) in cases {
            assert_eq!(Glm47.render(&msgs, &tools, think).unwrap(), want, "{name}");
        }
        assert_eq!(Glm47.leading_bos(), "");
    }

    #[test]
    fn glm_ocr_turns() {
        let off = Think::Bool(false);
        let on = Think::Bool(true);
        let cases: Vec<Case> = vec![
            (
                "unset adds nothing",
                vec![Message {
                    images: 2,
                    ..m("user", "Read [img] please")
                }],
                vec![],
                None,
                "[gMASK]<sop><|user|>\n[img-1] Read [img-0] please<|assistant|>\n".into(),
            ),
            (
                "on adds nothing either",
                vec![m("user", "Hi")],
                vec![],
                Some(&on),
                "[gMASK]<sop><|user|>\nHi<|assistant|>\n".into(),
            ),
            (
                "off: /nothink and an empty think block",
                vec![m("user", "Hi")],
                vec![],
                Some(&off),
                "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>\n".into(),
            ),
            (
                "whole conversation, thinking off",
                conversation(),
                vec![weather_tool()],
                Some(&off),
                format!(
                    "[gMASK]<sop>{TOOLS}<|system|>\nBe kind.\n<|user|>\n[img-0] What is in this?/nothink<|assistant|>\n<think>Look.</think>\nLet me check.\n<tool_call>get_weather<arg_key>location</arg_key><arg_value>Tokyo</arg_value><arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{{\"a\":\"\\u003cx\\u003e\",\"z\":true}}</arg_value><arg_key>none</arg_key><arg_value>null</arg_value></tool_call>\n<|observation|>\n<tool_response>\n[img-1] sunny\n</tool_response>\n\n<tool_response>\n22C\n</tool_response>\n<|assistant|>\n<think></think>\nSunny, 22C.\n<|user|>\nThanks/nothink<|assistant|>\n<think></think>\n"
                ),
            ),
        ];
        for (name, msgs, tools, think, want) in cases {
            assert_eq!(GlmOcr.render(&msgs, &tools, think).unwrap(), want, "{name}");
        }
        assert_eq!(GlmOcr.leading_bos(), "");
    }
}
