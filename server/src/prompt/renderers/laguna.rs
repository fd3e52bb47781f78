//! The `laguna` and `poolside-v1` renderers (Ollama's `LagunaRenderer` and `LagunaV8Renderer`,
//! Poolside's Laguna models): `〈|EOS|〉` then `<system>`, `<user>`, `<assistant>` and
//! `<tool_response>` blocks, the tools as spaced JSON lines in `<available_tools>`, and calls as
//! `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>` — the format the
//! `laguna` and `poolside-v1` parsers read back.
//!
//! Rules (Ollama's, reproduced byte for byte), for both:
//! - thinking is on only when the request asks (`think` true or a known level); the prompt ends
//!   with `<assistant>` and `<think>` (on) or `</think>` (off);
//! - a first `system` message replaces the default Poolside system line (its trailing whitespace
//!   trimmed; a blank one drops it); later system messages are their own blocks; roles other than
//!   system/user/assistant/tool print nothing; images are not marked;
//! - call arguments print in the client's order, strings bare and anything else as spaced JSON.
//!
//! `laguna` (the v2 template) puts newlines inside every block, prints the system block only for a
//! system text or tools (with the call-format instructions, which mention `<think>` when thinking
//! is on), reads an assistant's reasoning from its thinking or else from a `<think>…</think>` in its
//! content, opens each assistant turn with that reasoning or a bare `</think>`, and continues a
//! final assistant message with content, reasoning or calls (no end tag and no new turn; an empty
//! one is closed and the prompt ends there). `poolside-v1` (v8) writes blocks without inner
//! newlines, prints the system block also when only thinking is on, shows every assistant turn's
//! thinking when thinking is on, and always closes assistant turns and opens a new one.

use serde_json::Value as J;

use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think, ToolCall};

/// `laguna`.
pub struct Laguna;

/// `poolside-v1`.
pub struct PoolsideV1;

const BOS: &str = "〈|EOS|〉";

const DEFAULT_SYSTEM: &str = "You are a helpful, conversationally-fluent assistant made by Poolside. You are here to be helpful to users through natural language conversations.";

const TOOLS_INTRO: &str = "### Tools\n\nYou may call functions to assist with the user query.\nAll available function signatures are listed below:\n<available_tools>\n";

const CALL_FORMAT: &str = "For each function call, return an unescaped XML-like object with function name and arguments within '<tool_call>' and '</tool_call>' tags, like here:\n";

const CALL_FORMAT_THINKING: &str = "Wrap your thinking in '<think>', '</think>' tags, followed by a function call. For each function call, return an unescaped XML-like object with function name and arguments within '<tool_call>' and '</tool_call>' tags, like here:\n<think> your thoughts here </think>\n";

const CALL_EXAMPLE: &str = "<tool_call>function-name\n<arg_key>argument-key</arg_key>\n<arg_value>value-of-argument-key</arg_value>\n</tool_call>";

/// What both variants share: thinking, the system text and where the conversation starts.
struct Setup<'a> {
    thinking: bool,
    system: &'a str,
    rest: &'a [Message],
}

fn setup<'a>(messages: &'a [Message], think: Option<&Think>) -> Setup<'a> {
    let (system, rest) = match messages.split_first() {
        Some((first, rest)) if first.role == "system" => (first.content.as_str(), rest),
        _ => (DEFAULT_SYSTEM, messages),
    };
    Setup {
        thinking: think.is_some_and(Think::enabled),
        system,
        rest,
    }
}

/// The `<available_tools>` lines: each tool as Go's spaced JSON.
fn tool_lines(out: &mut String, tools: &[J]) {
    out.push_str(TOOLS_INTRO);
    for t in tools {
        out.push_str(&json::with_spaces(&json::go(&json::tool(t))));
        out.push('\n');
    }
}

/// `formatLagunaToolCallArgument`: strings bare, anything else as spaced JSON.
fn argument(v: &J) -> String {
    match v {
        J::String(s) => s.clone(),
        v => json::with_spaces(&json::go(&json::any(v))),
    }
}

/// One call; `sep` goes after the name and after each key and value line.
fn write_call(out: &mut String, c: &ToolCall, sep: &str) {
    out.push_str("<tool_call>");
    out.push_str(&c.name);
    out.push_str(sep);
    for (name, value) in &c.arguments {
        out.push_str("<arg_key>");
        out.push_str(name);
        out.push_str("</arg_key>");
        out.push_str(sep);
        out.push_str("<arg_value>");
        out.push_str(&argument(value));
        out.push_str("</arg_value>");
        out.push_str(sep);
    }
    out.push_str("</tool_call>");
}

impl Renderer for Laguna {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let s = setup(messages, think);
        let mut out = BOS.to_string();
        let has_system = !s.system.trim().is_empty();
        if has_system || !tools.is_empty() {
            out.push_str("<system>\n");
            if has_system {
                out.push('\n');
                out.push_str(s.system.trim_end());
            }
            if !tools.is_empty() {
                out.push_str("\n\n");
                tool_lines(&mut out, tools);
                out.push_str("</available_tools>\n\n");
                out.push_str(if s.thinking {
                    CALL_FORMAT_THINKING
                } else {
                    CALL_FORMAT
                });
                out.push_str(CALL_EXAMPLE);
            }
            out.push_str("\n</system>\n");
        }

        for (i, m) in s.rest.iter().enumerate() {
            match m.role.as_str() {
                "user" => block(&mut out, "user", &m.content, "\n"),
                "tool" => block(&mut out, "tool_response", &m.content, "\n"),
                "system" => block(&mut out, "system", &m.content, "\n"),
                "assistant" => {
                    let (content, reasoning) =
                        v2_assistant(&m.content, m.thinking.as_deref().unwrap_or(""));
                    let (content, reasoning) = (content.trim(), reasoning.trim());
                    let prefill = i + 1 == s.rest.len()
                        && (!content.is_empty()
                            || !reasoning.is_empty()
                            || !m.tool_calls.is_empty());
                    out.push_str("<assistant>\n");
                    if reasoning.is_empty() {
                        out.push_str("</think>\n");
                    } else {
                        out.push_str("<think>\n");
                        out.push_str(reasoning);
                        out.push_str("\n</think>\n");
                    }
                    if !content.is_empty() {
                        out.push_str(content);
                        out.push('\n');
                    }
                    for c in &m.tool_calls {
                        write_call(&mut out, c, "\n");
                        out.push('\n');
                    }
                    if !prefill {
                        out.push_str("</assistant>\n");
                    }
                }
                _ => {}
            }
        }

        if messages.last().is_none_or(|m| m.role != "assistant") {
            out.push_str("<assistant>\n");
            out.push_str(if s.thinking { "<think>" } else { "</think>" });
        }
        Ok(out)
    }
}

impl Renderer for PoolsideV1 {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let s = setup(messages, think);
        let mut out = BOS.to_string();
        let has_system = !s.system.trim().is_empty();
        if has_system || !tools.is_empty() || s.thinking {
            out.push_str("<system>");
            if has_system {
                out.push_str(s.system.trim_end());
                if !tools.is_empty() {
                    out.push_str("\n\n");
                }
            }
            if !tools.is_empty() {
                tool_lines(&mut out, tools);
                out.push_str("</available_tools>");
            }
            out.push_str("</system>\n");
        }

        for m in s.rest {
            match m.role.as_str() {
                "user" => block(&mut out, "user", &m.content, ""),
                "tool" => block(&mut out, "tool_response", &m.content, ""),
                "system" => block(&mut out, "system", &m.content, ""),
                "assistant" => {
                    out.push_str("<assistant>");
                    if s.thinking {
                        out.push_str("<think>");
                        out.push_str(m.thinking.as_deref().unwrap_or(""));
                    }
                    out.push_str("</think>");
                    out.push_str(&m.content);
                    for c in &m.tool_calls {
                        write_call(&mut out, c, "");
                    }
                    out.push_str("</assistant>\n");
                }
                _ => {}
            }
        }

        out.push_str("<assistant>");
        out.push_str(if s.thinking { "<think>" } else { "</think>" });
        Ok(out)
    }
}

/// `<tag>` + `inner` + content + `inner` + `</tag>\n`.
fn block(out: &mut String, tag: &str, content: &str, inner: &str) {
    out.push('<');
    out.push_str(tag);
    out.push('>');
    out.push_str(inner);
    out.push_str(content);
    out.push_str(inner);
    out.push_str("</");
    out.push_str(tag);
    out.push_str(">\n");
}

/// `lagunaV2AssistantContent`: content with a `</think>` splits into the reasoning before it
/// (after the last `<think>`, used only when the message has no thinking of its own) and the
/// content after the last `</think>`, newlines trimmed at the seams.
fn v2_assistant<'a>(content: &'a str, thinking: &'a str) -> (&'a str, &'a str) {
    const CLOSE: &str = "</think>";
    let Some(first) = content.find(CLOSE) else {
        return (content, thinking);
    };
    let mut reasoning = thinking;
    if reasoning.is_empty() {
        let mut before = content[..first].trim_end_matches('\n');
        if let Some(i) = before.rfind("<think>") {
            before = &before[i + "<think>".len()..];
        }
        reasoning = before.trim_start_matches('\n');
    }
    let last = content.rfind(CLOSE).unwrap_or(first);
    (
        content[last + CLOSE.len()..].trim_start_matches('\n'),
        reasoning,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{assistant, call, m as msg};
    use serde_json::json;

    fn weather() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "description": "Get weather",
            "parameters": {"type": "object", "required": ["location"],
                "properties": {"location": {"type": "string", "description": "City"}}}}})
    }

    const WEATHER_LINE: &str = r#"{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {"type": "object", "required": ["location"], "properties": {"location": {"type": "string", "description": "City"}}}}}"#;

    fn v2_header() -> String {
        format!("{BOS}<system>\n\n{DEFAULT_SYSTEM}\n</system>\n")
    }

    #[test]
    fn laguna_renders_the_v2_template() {
        let on = Think::Bool(true);
        let off = Think::Bool(false);
        let h = v2_header();
        let cases: Vec<(&str, Vec<Message>, Option<&Think>, String)> = vec![
            ("empty", vec![], None, format!("{h}<assistant>\n</think>")),
            (
                "thinking on",
                vec![msg("user", "Hello")],
                Some(&on),
                format!("{h}<user>\nHello\n</user>\n<assistant>\n<think>"),
            ),
            (
                "thinking off; system trimmed at the end only",
                vec![msg("system", " Stay concise.\n\n"), msg("user", "Hi")],
                Some(&off),
                format!("{BOS}<system>\n\n Stay concise.\n</system>\n<user>\nHi\n</user>\n<assistant>\n</think>"),
            ),
            (
                "a blank system drops the block; later system, tool and unknown roles",
                vec![
                    msg("system", "  "),
                    msg("user", "Hi"),
                    msg("system", "Second."),
                    msg("tool", "out"),
                    msg("developer", "x"),
                ],
                None,
                format!("{BOS}<user>\nHi\n</user>\n<system>\nSecond.\n</system>\n<tool_response>\nout\n</tool_response>\n<assistant>\n</think>"),
            ),
            (
                "history: reasoning from thinking or from think tags in content",
                vec![
                    msg("user", "a"),
                    assistant("  Answer. ", Some("  why  "), vec![]),
                    msg("user", "b"),
                    assistant("x<think>\n\nplan\n\n</think>\n\nDone</think>\n\nReally", None, vec![]),
                    msg("user", "c"),
                    assistant("", None, vec![]),
                    msg("user", "d"),
                ],
                None,
                format!("{h}<user>\na\n</user>\n<assistant>\n<think>\nwhy\n</think>\nAnswer.\n</assistant>\n<user>\nb\n</user>\n<assistant>\n<think>\nplan\n</think>\nReally\n</assistant>\n<user>\nc\n</user>\n<assistant>\n</think>\n</assistant>\n<user>\nd\n</user>\n<assistant>\n</think>"),
            ),
            (
                "prefill is continued in place",
                vec![msg("user", "a"), assistant("The answer is", None, vec![])],
                Some(&on),
                format!("{h}<user>\na\n</user>\n<assistant>\n</think>\nThe answer is\n"),
            ),
            (
                "an empty final assistant turn is closed and nothing follows",
                vec![msg("user", "a"), assistant(" ", Some(" "), vec![])],
                None,
                format!("{h}<user>\na\n</user>\n<assistant>\n</think>\n</assistant>\n"),
            ),
            (
                "calls print their arguments in order",
                vec![
                    msg("user", "a"),
                    assistant(
                        "",
                        None,
                        vec![call("f", json!({"s": "<x>", "n": 3, "f": 2.5, "b": true, "z": null, "o": {"b": [1], "a": "&"}}))],
                    ),
                    msg("tool", "r"),
                ],
                None,
                format!("{h}<user>\na\n</user>\n<assistant>\n</think>\n<tool_call>f\n<arg_key>s</arg_key>\n<arg_value><x></arg_value>\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n<arg_key>f</arg_key>\n<arg_value>2.5</arg_value>\n<arg_key>b</arg_key>\n<arg_value>true</arg_value>\n<arg_key>z</arg_key>\n<arg_value>null</arg_value>\n<arg_key>o</arg_key>\n<arg_value>{{\"a\": \"\\u0026\", \"b\": [1]}}</arg_value>\n</tool_call>\n</assistant>\n<tool_response>\nr\n</tool_response>\n<assistant>\n</think>"),
            ),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(Laguna.render(&msgs, &[], think).unwrap(), want, "{name}");
        }
        assert_eq!(Laguna.leading_bos(), BOS);
    }

    #[test]
    fn laguna_tools_header() {
        let on = Think::Bool(true);
        let got = Laguna
            .render(&[msg("user", "W?")], &[weather()], Some(&on))
            .unwrap();
        let want = format!("{BOS}<system>\n\n{DEFAULT_SYSTEM}\n\n{TOOLS_INTRO}{WEATHER_LINE}\n</available_tools>\n\n{CALL_FORMAT_THINKING}{CALL_EXAMPLE}\n</system>\n<user>\nW?\n</user>\n<assistant>\n<think>");
        assert_eq!(got, want);
        let got = Laguna
            .render(&[msg("system", ""), msg("user", "W?")], &[weather()], None)
            .unwrap();
        let want = format!("{BOS}<system>\n\n\n{TOOLS_INTRO}{WEATHER_LINE}\n</available_tools>\n\n{CALL_FORMAT}{CALL_EXAMPLE}\n</system>\n<user>\nW?\n</user>\n<assistant>\n</think>");
        assert_eq!(got, want);
    }

    #[test]
    fn poolside_v1_renders_the_v8_template() {
        let on = Think::Bool(true);
        let h = format!("{BOS}<system>{DEFAULT_SYSTEM}</system>\n");
        let cases: Vec<(&str, Vec<Message>, Option<&Think>, String)> = vec![
            ("empty", vec![], None, format!("{h}<assistant></think>")),
            (
                "a blank system with thinking on keeps an empty block",
                vec![msg("system", ""), msg("user", "Hi")],
                Some(&on),
                format!("{BOS}<system></system>\n<user>Hi</user>\n<assistant><think>"),
            ),
            (
                "a blank system without thinking or tools drops it",
                vec![msg("system", " \n"), msg("user", "Hi"), msg("system", "S2")],
                None,
                format!("{BOS}<user>Hi</user>\n<system>S2</system>\n<assistant></think>"),
            ),
            (
                "assistant turns show thinking when on, and are always closed",
                vec![
                    msg("user", "a"),
                    assistant(" A ", Some("why"), vec![call("f", json!({"k": "v", "n": [1, 2]}))]),
                    msg("tool", "r"),
                    assistant("Prefill", None, vec![]),
                ],
                Some(&on),
                format!("{h}<user>a</user>\n<assistant><think>why</think> A <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value><arg_key>n</arg_key><arg_value>[1, 2]</arg_value></tool_call></assistant>\n<tool_response>r</tool_response>\n<assistant><think></think>Prefill</assistant>\n<assistant><think>"),
            ),
            (
                "thinking hidden when off",
                vec![msg("user", "a"), assistant("A", Some("why"), vec![])],
                None,
                format!("{h}<user>a</user>\n<assistant></think>A</assistant>\n<assistant></think>"),
            ),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(
                PoolsideV1.render(&msgs, &[], think).unwrap(),
                want,
                "{name}"
            );
        }
        let tools = [weather()];
        let got = PoolsideV1
            .render(&[msg("system", "S \n"), msg("user", "W?")], &tools, None)
            .unwrap();
        assert_eq!(got, format!("{BOS}<system>S\n\n{TOOLS_INTRO}{WEATHER_LINE}\n</available_tools></system>\n<user>W?</user>\n<assistant></think>"));
        let got = PoolsideV1
            .render(&[msg("system", ""), msg("user", "W?")], &tools, None)
            .unwrap();
        assert_eq!(got, format!("{BOS}<system>{TOOLS_INTRO}{WEATHER_LINE}\n</available_tools></system>\n<user>W?</user>\n<assistant></think>"));
        assert_eq!(PoolsideV1.leading_bos(), BOS);
    }
}
