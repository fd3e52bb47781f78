//! DeepSeek V3.1's prompt format (Ollama's `DeepSeek3Renderer`, variant `Deepseek31`), served as
//! the `RENDERER` name `deepseek3.1`. Also owns the DeepSeek special tokens that the `cogito`
//! renderer (same tokenizer family) prints.
//!
//! The prompt: BOS, every system message joined by a blank line, a `## Tools` block (each tool's
//! parameters as Go's `json.Marshal`), then the turns: `<｜User｜>…`, an assistant turn right after
//! a user opens with `<｜Assistant｜>` and `</think>` (or `<think>` for the current turn's
//! thinking), tool calls as `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{args}<｜tool▁call▁end｜>`,
//! tool results as `<｜tool▁output▁begin｜>…<｜tool▁output▁end｜>`. A chat that ends on a user turn
//! gets `<｜Assistant｜>` and `<think>` when the request asks for thinking (`think` true or a
//! level; unset is off), `</think>` otherwise.

use serde_json::Value as J;

use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

pub(super) const BOS: &str = "<｜begin▁of▁sentence｜>";
pub(super) const EOS: &str = "<｜end▁of▁sentence｜>";
pub(super) const USER: &str = "<｜User｜>";
pub(super) const ASSISTANT: &str = "<｜Assistant｜>";
pub(crate) const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub(crate) const CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub(crate) const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(crate) const CALL_END: &str = "<｜tool▁call▁end｜>";
pub(crate) const SEP: &str = "<｜tool▁sep｜>";
pub(crate) const OUTPUT_BEGIN: &str = "<｜tool▁output▁begin｜>";
pub(crate) const OUTPUT_END: &str = "<｜tool▁output▁end｜>";

/// `deepseek3.1`: thinking-capable DeepSeek V3.1.
pub struct DeepSeek3 {
    /// Ollama's `IsThinking`: whether the model can think at all (true for `deepseek3.1`).
    pub thinking: bool,
}

impl Renderer for DeepSeek3 {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let thinking = self.thinking && think.is_some_and(Think::enabled);
        let mut out = String::from(BOS);
        let system: Vec<&str> = messages
            .iter()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
            .collect();
        out.push_str(&system.join("\n\n"));
        if !tools.is_empty() {
            tools_block(&mut out, tools);
        }

        let last_user = messages.iter().rposition(|m| m.role == "user");
        let (mut after_user, mut after_tool) = (false, false);
        for (i, m) in messages.iter().enumerate() {
            match m.role.as_str() {
                "user" => {
                    (after_user, after_tool) = (true, false);
                    out.push_str(USER);
                    out.push_str(&m.content);
                }
                "assistant" if !m.tool_calls.is_empty() => {
                    if after_user {
                        out.push_str(ASSISTANT);
                        out.push_str("</think>");
                    }
                    (after_user, after_tool) = (false, false);
                    out.push_str(&m.content);
                    out.push_str(CALLS_BEGIN);
                    for c in &m.tool_calls {
                        out.push_str(CALL_BEGIN);
                        out.push_str(&c.name);
                        out.push_str(SEP);
                        out.push_str(&json::go(&json::arguments(&c.arguments)));
                        out.push_str(CALL_END);
                    }
                    out.push_str(CALLS_END);
                    out.push_str(EOS);
                }
                "assistant" => {
                    if after_user {
                        out.push_str(ASSISTANT);
                        // Only the turn after the last user message opens a thinking block, and
                        // Ollama prints the tag without the thinking text itself.
                        let current = last_user.is_none_or(|u| i > u);
                        let has_thinking = m.thinking.as_deref().is_some_and(|t| !t.is_empty());
                        out.push_str(if has_thinking && thinking && current {
                            "<think>"
                        } else {
                            "</think>"
                        });
                    }
                    after_user = false;
                    if after_tool {
                        out.push_str(&m.content);
                        after_tool = false;
                    } else {
                        // A reply that still carries its thinking keeps only what follows it.
                        let content = match m.content.split_once("</think>") {
                            Some((_, rest)) => rest,
                            None => &m.content,
                        };
                        out.push_str(content);
                    }
                    out.push_str(EOS);
                }
                "tool" => {
                    (after_user, after_tool) = (false, true);
                    out.push_str(OUTPUT_BEGIN);
                    out.push_str(&m.content);
                    out.push_str(OUTPUT_END);
                }
                _ => {}
            }
        }
        if after_user && !after_tool {
            out.push_str(ASSISTANT);
            out.push_str(if thinking { "<think>" } else { "</think>" });
        }
        Ok(out)
    }
}

/// The `## Tools` section: name, description and the parameters object of each tool, then the
/// call format the model must follow.
fn tools_block(out: &mut String, tools: &[J]) {
    out.push_str("\n\n## Tools\nYou have access to the following tools:\n");
    for t in tools {
        let t = json::tool(t);
        let f = &t["function"];
        out.push_str("\n### ");
        out.push_str(f["name"].as_str().unwrap_or(""));
        out.push_str("\nDescription: ");
        out.push_str(f["description"].as_str().unwrap_or(""));
        out.push_str("\n\nParameters: ");
        out.push_str(&json::go(&f["parameters"]));
        out.push('\n');
    }
    out.push_str("\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n");
    out.push_str(CALLS_BEGIN);
    out.push_str(CALL_BEGIN);
    out.push_str("tool_call_name");
    out.push_str(SEP);
    out.push_str("tool_call_arguments");
    out.push_str(CALL_END);
    out.push_str("{{additional_tool_calls}}");
    out.push_str(CALLS_END);
    out.push_str("\n\nWhere:\n\n");
    out.push_str("- `tool_call_name` must be an exact match to one of the available tools\n");
    out.push_str(
        "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n",
    );
    out.push_str("- For multiple tool calls, chain them directly without separators or spaces\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{call, m, thought, with_calls};
    use serde_json::json;

    fn render(msgs: &[Message], tools: &[J], think: Option<Think>) -> String {
        DeepSeek3 { thinking: true }
            .render(msgs, tools, think.as_ref())
            .unwrap()
    }

    const B: &str = "<｜begin▁of▁sentence｜>";

    #[test]
    fn turns_and_thinking_switch() {
        let on = Some(Think::Bool(true));
        let off = Some(Think::Bool(false));
        let weather = || call("get_weather", json!({"city": "Paris", "n": 2}));
        let cases: Vec<(&str, Vec<Message>, Option<Think>, String)> = vec![
            (
                "unset is off",
                vec![m("user", "Hi")],
                None,
                format!("{B}<｜User｜>Hi<｜Assistant｜></think>"),
            ),
            (
                "on",
                vec![m("user", "Hi")],
                on.clone(),
                format!("{B}<｜User｜>Hi<｜Assistant｜><think>"),
            ),
            (
                "a level is on",
                vec![m("user", "Hi")],
                Some(Think::Level("high".into())),
                format!("{B}<｜User｜>Hi<｜Assistant｜><think>"),
            ),
            (
                "systems join wherever they are",
                vec![m("system", "A"), m("user", "Hi"), m("system", "B")],
                off.clone(),
                format!("{B}A\n\nB<｜User｜>Hi<｜Assistant｜></think>"),
            ),
            (
                "history drops thinking before </think>",
                vec![
                    m("user", "Q1"),
                    m("assistant", "<think>x</think>A1"),
                    m("user", "Q2"),
                ],
                on.clone(),
                format!(
                    "{B}<｜User｜>Q1<｜Assistant｜></think>A1<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜><think>"
                ),
            ),
            (
                "current turn with thinking opens <think> but omits the text",
                vec![m("user", "Q"), thought("A", "hmm")],
                on.clone(),
                format!("{B}<｜User｜>Q<｜Assistant｜><think>A<｜end▁of▁sentence｜>"),
            ),
            (
                "earlier turn with thinking closes",
                vec![m("user", "Q"), thought("A", "hmm"), m("user", "Q2")],
                on.clone(),
                format!(
                    "{B}<｜User｜>Q<｜Assistant｜></think>A<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜><think>"
                ),
            ),
            (
                "tool round trip",
                vec![
                    m("user", "Weather?"),
                    with_calls("Checking.", vec![weather(), call("f", json!({}))]),
                    m("tool", "22C"),
                    m("tool", "ok"),
                    m("assistant", "It is <b>22C</b></think>kept"),
                    m("user", "Thanks"),
                ],
                off.clone(),
                format!(
                    "{B}<｜User｜>Weather?<｜Assistant｜></think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{{\"city\":\"Paris\",\"n\":2}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{{}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>22C<｜tool▁output▁end｜><｜tool▁output▁begin｜>ok<｜tool▁output▁end｜>It is <b>22C</b></think>kept<｜end▁of▁sentence｜><｜User｜>Thanks<｜Assistant｜></think>"
                ),
            ),
            (
                "ending on a tool result adds no generation prompt",
                vec![m("user", "Q"), with_calls("", vec![weather()]), m("tool", "r")],
                on.clone(),
                format!(
                    "{B}<｜User｜>Q<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{{\"city\":\"Paris\",\"n\":2}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>r<｜tool▁output▁end｜>"
                ),
            ),
            (
                "calls after a tool result get no assistant header",
                vec![
                    m("user", "Q"),
                    with_calls("", vec![call("a", json!({"s": "<&>"}))]),
                    m("tool", "r"),
                    with_calls("", vec![call("b", json!({"x": {"z": 1, "y": [1.5]}}))]),
                ],
                off.clone(),
                format!(
                    "{B}<｜User｜>Q<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{{\"s\":\"\\u003c\\u0026\\u003e\"}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>r<｜tool▁output▁end｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>b<｜tool▁sep｜>{{\"x\":{{\"y\":[1.5],\"z\":1}}}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
                ),
            ),
            (
                "prefill ends with the assistant's end of sentence",
                vec![m("user", "Q"), m("assistant", "The answer")],
                on.clone(),
                format!("{B}<｜User｜>Q<｜Assistant｜></think>The answer<｜end▁of▁sentence｜>"),
            ),
            (
                "other roles print nothing; no user at all",
                vec![m("assistant", "A"), m("developer", "D")],
                on,
                format!("{B}A<｜end▁of▁sentence｜>"),
            ),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(render(&msgs, &[], think), want, "{name}");
        }
    }

    #[test]
    fn tools_block_prints_parameters_as_go() {
        let tools = [
            json!({"type": "function", "function": {"name": "get_weather",
                "description": "Weather <now>",
                "parameters": {"type": "object", "required": ["city"],
                    "properties": {"city": {"type": "string", "description": "City"}}}}}),
            json!({"type": "function", "function": {"name": "noop"}}),
        ];
        let got = render(&[m("system", "S"), m("user", "Hi")], &tools, None);
        let want = format!(
            "{B}S\n\n## Tools\nYou have access to the following tools:\n\
             \n### get_weather\nDescription: Weather <now>\n\nParameters: {{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{{\"city\":{{\"type\":\"string\",\"description\":\"City\"}}}}}}\n\
             \n### noop\nDescription: \n\nParameters: {{\"type\":\"\",\"properties\":null}}\n\
             \nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n\
             <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{{{{additional_tool_calls}}}}<｜tool▁calls▁end｜>\n\n\
             Where:\n\n\
             - `tool_call_name` must be an exact match to one of the available tools\n\
             - `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n\
             - For multiple tool calls, chain them directly without separators or spaces\n\
             <｜User｜>Hi<｜Assistant｜></think>"
        );
        assert_eq!(got, want);
        assert_eq!(DeepSeek3 { thinking: true }.leading_bos(), B);
    }

    #[test]
    fn a_model_without_thinking_never_opens_it() {
        let on = Think::Bool(true);
        let got = DeepSeek3 { thinking: false }
            .render(&[m("user", "Hi")], &[], Some(&on))
            .unwrap();
        assert_eq!(got, format!("{B}<｜User｜>Hi<｜Assistant｜></think>"));
    }
}
