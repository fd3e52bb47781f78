//! Deep Cogito's prompt format (Ollama's `CogitoRenderer`), served as the `RENDERER` name
//! `cogito`. It speaks DeepSeek's special tokens ([`super::deepseek3`]) with its own system prompt
//! and tool-call body.
//!
//! The prompt: BOS, Cogito's default system prompt (prefixed by "Enable deep thinking
//! subroutine." when the request asks for thinking) with a leading system message appended, the
//! tools as Go's `json.MarshalIndent` (4 spaces) in ```` ```json ```` fences, then the turns:
//! every user turn ends with `<｜Assistant｜>`, calls are
//! `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name` + a fenced JSON body, consecutive tool results
//! share one `<｜tool▁outputs▁begin｜>…<｜tool▁outputs▁end｜>` group. Only the first message may
//! be a system message; later ones print nothing.

use serde_json::Value as J;

use super::deepseek3::{
    ASSISTANT, BOS, CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, EOS, OUTPUT_BEGIN, OUTPUT_END,
    SEP, USER,
};
use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

pub(super) const OUTPUTS_BEGIN: &str = "<｜tool▁outputs▁begin｜>";
pub(super) const OUTPUTS_END: &str = "<｜tool▁outputs▁end｜>";

const DEFAULT_SYSTEM: &str = "You are Cogito, an AI assistant created by Deep Cogito, which is an AI research lab based in San Francisco.";

/// `cogito`: Deep Cogito v2 (thinking-capable).
pub struct Cogito {
    /// Ollama's `isThinking` (true for `cogito`).
    pub thinking: bool,
}

impl Renderer for Cogito {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let thinking = self.thinking && think.is_some_and(Think::enabled);
        let (system, turns) = match messages.first() {
            Some(m) if m.role == "system" => (m.content.as_str(), &messages[1..]),
            _ => ("", messages),
        };

        let mut out = String::from(BOS);
        if thinking {
            out.push_str("Enable deep thinking subroutine.\n\n");
            out.push_str(DEFAULT_SYSTEM);
            if !system.is_empty() {
                out.push_str("\n\n");
                out.push_str(system);
                out.push_str("\n\n");
            }
        } else {
            out.push_str(DEFAULT_SYSTEM);
            if !system.is_empty() {
                out.push_str("\n\n");
                out.push_str(system);
            }
        }
        if !tools.is_empty() {
            out.push_str("\nYou have the following functions available:\n");
            for t in tools {
                out.push_str("```json\n");
                out.push_str(&indent(&json::go(&json::tool(t)), "    "));
                out.push_str("\n```\n");
            }
        }

        let (mut outputs_open, mut after_user) = (false, false);
        for (i, m) in turns.iter().enumerate() {
            match m.role.as_str() {
                "user" => {
                    after_user = true;
                    out.push_str(USER);
                    out.push_str(&m.content);
                    out.push_str(ASSISTANT);
                }
                "assistant" => {
                    after_user = false;
                    out.push_str(&m.content);
                    if !m.tool_calls.is_empty() {
                        out.push_str(CALLS_BEGIN);
                        let bodies: Vec<String> = m
                            .tool_calls
                            .iter()
                            .map(|c| {
                                format!(
                                    "{CALL_BEGIN}function{SEP}{}\n```json\n{}\n```{CALL_END}",
                                    c.name,
                                    json::go(&json::arguments(&c.arguments))
                                )
                            })
                            .collect();
                        out.push_str(&bodies.join("\n"));
                        out.push_str(CALLS_END);
                    }
                    out.push_str(EOS);
                }
                "tool" => {
                    after_user = false;
                    if !outputs_open {
                        out.push_str(OUTPUTS_BEGIN);
                        outputs_open = true;
                    }
                    out.push_str(OUTPUT_BEGIN);
                    out.push_str(&m.content);
                    out.push_str(OUTPUT_END);
                    if turns.get(i + 1).is_some_and(|n| n.role == "tool") {
                        out.push('\n');
                    } else {
                        out.push_str(OUTPUTS_END);
                        outputs_open = false;
                    }
                }
                _ => {}
            }
        }
        if !after_user {
            out.push_str(ASSISTANT);
        }
        if thinking {
            out.push_str("<think>\n");
        }
        Ok(out)
    }
}

/// Go's `json.Indent` of compact JSON (what `json.MarshalIndent` prints, prefix ""): one member
/// per line, `": "` after keys, empty objects and arrays kept as `{}` / `[]`.
pub(super) fn indent(compact: &str, unit: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let (mut depth, mut in_str, mut esc, mut opened) = (0usize, false, false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&unit.repeat(depth));
    };
    for c in compact.chars() {
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        // The line break after `{` / `[` waits for the first member (none for empty ones).
        if opened && c != '}' && c != ']' {
            opened = false;
            depth += 1;
            newline(&mut out, depth);
        }
        match c {
            '{' | '[' => {
                out.push(c);
                opened = true;
            }
            '}' | ']' => {
                if opened {
                    opened = false;
                } else {
                    depth -= 1;
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            '"' => {
                out.push(c);
                in_str = true;
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{call, m};
    use serde_json::json;

    fn render(msgs: &[Message], tools: &[J], think: Option<Think>) -> String {
        Cogito { thinking: true }
            .render(msgs, tools, think.as_ref())
            .unwrap()
    }

    const B: &str = "<｜begin▁of▁sentence｜>";
    const SYS: &str = DEFAULT_SYSTEM;

    #[test]
    fn system_prompt_and_thinking() {
        let on = Some(Think::Bool(true));
        let cases: Vec<(&str, Vec<Message>, Option<Think>, String)> = vec![
            (
                "unset",
                vec![m("user", "Hi")],
                None,
                format!("{B}{SYS}<｜User｜>Hi<｜Assistant｜>"),
            ),
            (
                "system appended",
                vec![m("system", "Be brief."), m("user", "Hi")],
                Some(Think::Bool(false)),
                format!("{B}{SYS}\n\nBe brief.<｜User｜>Hi<｜Assistant｜>"),
            ),
            (
                "thinking",
                vec![m("user", "Hi")],
                on.clone(),
                format!("{B}Enable deep thinking subroutine.\n\n{SYS}<｜User｜>Hi<｜Assistant｜><think>\n"),
            ),
            (
                "thinking with system",
                vec![m("system", "S"), m("user", "Hi")],
                Some(Think::Level("low".into())),
                format!(
                    "{B}Enable deep thinking subroutine.\n\n{SYS}\n\nS\n\n<｜User｜>Hi<｜Assistant｜><think>\n"
                ),
            ),
            (
                "an unknown level is off",
                vec![m("user", "Hi")],
                Some(Think::Level("extreme".into())),
                format!("{B}{SYS}<｜User｜>Hi<｜Assistant｜>"),
            ),
            (
                "later system messages print nothing; prefill gets the header again",
                vec![
                    m("user", "Q"),
                    m("system", "ignored"),
                    m("assistant", "A"),
                ],
                on,
                format!(
                    "{B}Enable deep thinking subroutine.\n\n{SYS}<｜User｜>Q<｜Assistant｜>A<｜end▁of▁sentence｜><｜Assistant｜><think>\n"
                ),
            ),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(render(&msgs, &[], think), want, "{name}");
        }
    }

    #[test]
    fn calls_and_grouped_outputs() {
        let msgs = vec![
            m("user", "Weather?"),
            Message {
                tool_calls: vec![
                    call("get_weather", json!({"city": "Paris"})),
                    call("get_time", json!({"tz": "<CET>"})),
                ],
                ..m("assistant", "Checking.")
            },
            m("tool", "22C"),
            m("tool", "noon"),
            m("user", "And?"),
            Message {
                tool_calls: vec![call("f", json!({}))],
                ..m("assistant", "")
            },
            m("tool", "x"),
        ];
        let want = format!(
            "{B}{SYS}<｜User｜>Weather?<｜Assistant｜>Checking.<｜tool▁calls▁begin｜>\
             <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{{\"city\":\"Paris\"}}\n```<｜tool▁call▁end｜>\n\
             <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{{\"tz\":\"\\u003cCET\\u003e\"}}\n```<｜tool▁call▁end｜>\
             <｜tool▁calls▁end｜><｜end▁of▁sentence｜>\
             <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>22C<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>noon<｜tool▁output▁end｜><｜tool▁outputs▁end｜>\
             <｜User｜>And?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{{}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>\
             <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>x<｜tool▁output▁end｜><｜tool▁outputs▁end｜><｜Assistant｜>"
        );
        assert_eq!(render(&msgs, &[], None), want);
    }

    #[test]
    fn tools_print_indented() {
        let tools = [
            json!({"type": "function", "function": {"name": "get_weather",
            "description": "Get <weather>",
            "parameters": {"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"], "enum": []}}}}}),
        ];
        let got = render(&[m("user", "Hi")], &tools, None);
        let want = format!(
            "{B}{SYS}\nYou have the following functions available:\n```json\n{{\n    \"type\": \"function\",\n    \"function\": {{\n        \"name\": \"get_weather\",\n        \"description\": \"Get \\u003cweather\\u003e\",\n        \"parameters\": {{\n            \"type\": \"object\",\n            \"required\": [\n                \"city\"\n            ],\n            \"properties\": {{\n                \"city\": {{\n                    \"type\": \"string\"\n                }},\n                \"days\": {{\n                    \"type\": [\n                        \"integer\",\n                        \"null\"\n                    ]\n                }}\n            }}\n        }}\n    }}\n}}\n```\n<｜User｜>Hi<｜Assistant｜>"
        );
        assert_eq!(got, want);
    }

    #[test]
    fn indent_matches_go() {
        for (compact, want) in [
            ("{}", "{}"),
            ("[]", "[]"),
            (
                r#"{"a":[],"b":{},"c":"x,{:}\"y"}"#,
                "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": \"x,{:}\\\"y\"\n}",
            ),
            ("[1,[2,{}]]", "[\n  1,\n  [\n    2,\n    {}\n  ]\n]"),
        ] {
            assert_eq!(indent(compact, "  "), want, "{compact}");
        }
    }
}
