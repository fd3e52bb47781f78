//! The `cohere` renderer (Ollama's `CohereRenderer`: Cohere North / Command A 2026 models such as
//! North-Mini-Code): a platform system turn holding the system prompt and an `# Available Tools`
//! JSON block, `<|START_TEXT|>`-wrapped turns, `<|START_THINKING|>` reasoning, calls as a
//! `<|START_ACTION|>` JSON array and results as a `<|START_TOOL_RESULT|>` array — the format the
//! `cohere` parser reads back.
//!
//! Rules (Ollama's, reproduced byte for byte):
//! - a first message whose role is `system` (any case) fills the platform turn; the tools block
//!   prints even with no tools; roles are read case-insensitively, `chatbot` is `assistant`, and
//!   roles other than system/user/assistant/tool print nothing; images are not marked;
//! - an assistant message with calls prints its thinking and the calls (its content is dropped),
//!   with call ids renumbered `0, 1, …` across the conversation; a tool result names the number
//!   of the call whose client id it carries, or its own id when no call had it; consecutive
//!   results share one turn;
//! - a final assistant message without calls is continued (its text left open, whatever its
//!   content); otherwise the prompt ends with a chatbot turn opened with `<|START_THINKING|>`
//!   (reasoning on: `think` unset or on) or an empty thinking block;
//! - the prompt itself carries no BOS; `leading_bos` is `<BOS_TOKEN>`, as Go's `LeadingBOS`.

use std::collections::HashMap;

use serde_json::{Map, Value as J};

use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

/// `cohere`.
pub struct Cohere;

const TURN_SYSTEM: &str = "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>";
const TURN_USER: &str = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>";
const TURN_CHATBOT: &str = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
const END_TURN: &str = "<|END_OF_TURN_TOKEN|>";

impl Renderer for Cohere {
    fn leading_bos(&self) -> &'static str {
        "<BOS_TOKEN>"
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let reasoning = think.is_none_or(Think::enabled);
        let (system, rest) = match messages.split_first() {
            Some((first, rest)) if role(first) == "system" => (first.content.as_str(), rest),
            _ => ("", messages),
        };

        let mut out = format!("{TURN_SYSTEM}<|START_TEXT|>");
        if !system.is_empty() {
            out.push_str(system);
            out.push_str("\n\n\n\n");
        }
        tools_section(&mut out, tools);
        out.push_str("<|END_TEXT|>");
        out.push_str(END_TURN);

        let mut ids = CallIds::default();
        let mut prefill = false;
        let mut i = 0;
        while i < rest.len() {
            let m = &rest[i];
            match role(m).as_str() {
                "system" => text_turn(&mut out, TURN_SYSTEM, &m.content),
                "user" => text_turn(&mut out, TURN_USER, &m.content),
                "assistant" | "chatbot" => {
                    out.push_str(TURN_CHATBOT);
                    let thinking = m.thinking.as_deref().unwrap_or("");
                    if !m.tool_calls.is_empty() {
                        out.push_str("\n            \n                ");
                        thinking_block(&mut out, thinking);
                        out.push_str("<|START_ACTION|>[");
                        for (j, c) in m.tool_calls.iter().enumerate() {
                            out.push_str("\n\n    {\"tool_call_id\": \"");
                            out.push_str(&ids.next(&c.id));
                            out.push_str("\", \"tool_name\": \"");
                            out.push_str(&c.name);
                            out.push_str("\", \"parameters\": ");
                            out.push_str(&spaced(&json::arguments(&c.arguments)));
                            out.push('}');
                            if j + 1 < m.tool_calls.len() {
                                out.push(',');
                            }
                        }
                        out.push_str("\n\n]<|END_ACTION|>");
                        out.push_str(END_TURN);
                    } else {
                        thinking_block(&mut out, thinking);
                        out.push_str("<|START_TEXT|>");
                        out.push_str(&m.content);
                        if i + 1 == rest.len() {
                            prefill = true;
                        } else {
                            out.push_str("<|END_TEXT|>");
                            out.push_str(END_TURN);
                        }
                    }
                }
                "tool" => {
                    out.push_str(TURN_SYSTEM);
                    out.push_str("<|START_TOOL_RESULT|>[");
                    tool_result(&mut out, &ids.result(m), &m.content);
                    while rest.get(i + 1).is_some_and(|n| role(n) == "tool") {
                        i += 1;
                        out.push(',');
                        tool_result(&mut out, &ids.result(&rest[i]), &rest[i].content);
                    }
                    out.push_str("\n\n]<|END_TOOL_RESULT|>");
                    out.push_str(END_TURN);
                }
                _ => {}
            }
            i += 1;
        }

        if !prefill {
            out.push_str(TURN_CHATBOT);
            out.push_str(if reasoning {
                "<|START_THINKING|>"
            } else {
                "<|START_THINKING|><|END_THINKING|>"
            });
        }
        Ok(out)
    }
}

/// A role as Go's `strings.ToLower` reads it.
fn role(m: &Message) -> String {
    m.role.to_lowercase()
}

fn text_turn(out: &mut String, turn: &str, content: &str) {
    out.push_str(turn);
    out.push_str("<|START_TEXT|>");
    out.push_str(content);
    out.push_str("<|END_TEXT|>");
    out.push_str(END_TURN);
}

fn thinking_block(out: &mut String, thinking: &str) {
    if !thinking.is_empty() {
        out.push_str("<|START_THINKING|>");
        out.push_str(thinking);
        out.push_str("<|END_THINKING|>");
    }
}

/// Go's `marshalWithSpaces` of a value.
fn spaced(v: &J) -> String {
    json::with_spaces(&json::go(v))
}

/// The `# Available Tools` block: one `{"name", "description", "parameters", "responses"}`
/// entry per tool, each followed by a blank line.
fn tools_section(out: &mut String, tools: &[J]) {
    out.push_str("# Available Tools\n```json\n[\n");
    if tools.is_empty() {
        out.push_str("\n\n");
    }
    for (i, t) in tools.iter().enumerate() {
        let printed = json::tool(t);
        let f = &printed["function"];
        out.push_str("\n    {\"name\": ");
        out.push_str(&json::go(&f["name"]));
        out.push_str(", \"description\": ");
        // `description` is omitted from the printed tool when empty; Go prints "" here.
        out.push_str(&json::go(f.get("description").unwrap_or(&J::from(""))));
        out.push_str(", \"parameters\": ");
        out.push_str(&spaced(&f["parameters"]));
        out.push_str(", \"responses\": null}");
        if i + 1 < tools.len() {
            out.push(',');
        }
        out.push_str("\n\n");
    }
    out.push_str("\n]\n```");
}

/// One entry of a `<|START_TOOL_RESULT|>` array.
fn tool_result(out: &mut String, id: &str, content: &str) {
    let mut wrapped = Map::new();
    wrapped.insert("content".into(), J::from(content));
    out.push_str("\n    {\n        \"tool_call_id\": \"");
    out.push_str(id);
    out.push_str("\",\n        \"results\": {\n\n            \n            \"0\": ");
    out.push_str(&spaced(&J::Object(wrapped)));
    out.push_str("\n\n        },\n        \"is_error\": null\n    }");
}

/// The template's `regen_tool_call_ids`: calls are numbered in order across the conversation;
/// a client id maps to the number of the first call that carried it.
#[derive(Default)]
struct CallIds {
    next: usize,
    by_id: HashMap<String, String>,
}

impl CallIds {
    fn next(&mut self, id: &str) -> String {
        let n = self.next.to_string();
        self.next += 1;
        if !id.is_empty() {
            self.by_id
                .entry(id.to_string())
                .or_insert_with(|| n.clone());
        }
        n
    }

    fn result(&self, m: &Message) -> String {
        let id = m.tool_call_id.as_deref().unwrap_or("");
        self.by_id
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{assistant, call_id as call, m as msg};
    use serde_json::json;

    fn result(id: Option<&str>, content: &str) -> Message {
        Message {
            tool_call_id: id.map(str::to_string),
            ..msg("tool", content)
        }
    }

    const NO_TOOLS: &str = "# Available Tools\n```json\n[\n\n\n\n]\n```";
    const OPEN: &str = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>";

    fn platform(system: &str) -> String {
        let system = if system.is_empty() {
            String::new()
        } else {
            format!("{system}\n\n\n\n")
        };
        format!("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>{system}{NO_TOOLS}<|END_TEXT|><|END_OF_TURN_TOKEN|>")
    }

    fn user(text: &str) -> String {
        format!("<|START_OF_TURN_TOKEN|><|USER_TOKEN|><|START_TEXT|>{text}<|END_TEXT|><|END_OF_TURN_TOKEN|>")
    }

    #[test]
    fn conversations_render_as_ollama() {
        let on = Think::Bool(true);
        let off = Think::Bool(false);
        let level = Think::Level("high".into());
        let bogus = Think::Level("bogus".into());
        let cases: Vec<(&str, Vec<Message>, Option<&Think>, String)> = vec![
            ("empty", vec![], None, format!("{}{OPEN}", platform(""))),
            (
                "system prompt fills the platform turn; reasoning defaults on",
                vec![msg("system", "Be brief."), msg("user", "Hi")],
                None,
                format!("{}{}{OPEN}", platform("Be brief."), user("Hi")),
            ),
            (
                "think off closes the thinking block; roles are case-insensitive",
                vec![msg("SYSTEM", "S"), msg("User", "Hi")],
                Some(&off),
                format!("{}{}{OPEN}<|END_THINKING|>", platform("S"), user("Hi")),
            ),
            (
                "think on and a level keep it open; an unknown level closes it",
                vec![msg("user", "Hi")],
                Some(&on),
                format!("{}{}{OPEN}", platform(""), user("Hi")),
            ),
            (
                "level",
                vec![msg("user", "Hi")],
                Some(&level),
                format!("{}{}{OPEN}", platform(""), user("Hi")),
            ),
            (
                "bogus level",
                vec![msg("user", "Hi")],
                Some(&bogus),
                format!("{}{}{OPEN}<|END_THINKING|>", platform(""), user("Hi")),
            ),
            (
                "a later system message is its own turn; unknown roles vanish",
                vec![msg("user", "a"), msg("system", "late"), msg("developer", "x")],
                None,
                format!(
                    "{}{}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>late<|END_TEXT|><|END_OF_TURN_TOKEN|>{OPEN}",
                    platform(""),
                    user("a")
                ),
            ),
            (
                "earlier assistant turns are closed, with their thinking",
                vec![
                    msg("user", "a"),
                    assistant("b", Some("t"), vec![]),
                    msg("Chatbot", "c"),
                    msg("user", "d"),
                ],
                None,
                format!(
                    "{}{}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>t<|END_THINKING|><|START_TEXT|>b<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_TEXT|>c<|END_TEXT|><|END_OF_TURN_TOKEN|>{}{OPEN}",
                    platform(""),
                    user("a"),
                    user("d")
                ),
            ),
            (
                "a final assistant message is continued, even an empty one, whatever think says",
                vec![msg("user", "a"), msg("assistant", "")],
                Some(&off),
                format!(
                    "{}{}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_TEXT|>",
                    platform(""),
                    user("a")
                ),
            ),
            (
                "images are not marked",
                vec![Message {
                    images: 2,
                    ..msg("user", "look")
                }],
                None,
                format!("{}{}{OPEN}", platform(""), user("look")),
            ),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(Cohere.render(&msgs, &[], think).unwrap(), want, "{name}");
        }
        assert_eq!(Cohere.leading_bos(), "<BOS_TOKEN>");
    }

    #[test]
    fn calls_are_renumbered_and_results_follow_them() {
        let msgs = vec![
            msg("user", "go"),
            assistant(
                "dropped",
                Some("plan"),
                vec![
                    call(
                        "abc",
                        "get_weather",
                        json!({"city": "Paris <&>", "n": 1.0, "o": {"z": 1, "a": [true, null]}}),
                    ),
                    call("", "noop", json!({})),
                ],
            ),
            result(Some("abc"), "sunny \"hot\""),
            result(Some("zzz"), "x"),
            result(None, "y"),
            assistant("", None, vec![call("abc", "again", json!({"k": "v"}))]),
            result(Some("abc"), "z"),
        ];
        let want = format!(
            "{}{}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>\n            \n                <|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[\n\n    {{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {{\"city\": \"Paris \\u003c\\u0026\\u003e\", \"n\": 1, \"o\": {{\"a\": [true, null], \"z\": 1}}}}}},\n\n    {{\"tool_call_id\": \"1\", \"tool_name\": \"noop\", \"parameters\": {{}}}}\n\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>\
             <|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n    {{\n        \"tool_call_id\": \"0\",\n        \"results\": {{\n\n            \n            \"0\": {{\"content\": \"sunny \\\"hot\\\"\"}}\n\n        }},\n        \"is_error\": null\n    }},\n    {{\n        \"tool_call_id\": \"zzz\",\n        \"results\": {{\n\n            \n            \"0\": {{\"content\": \"x\"}}\n\n        }},\n        \"is_error\": null\n    }},\n    {{\n        \"tool_call_id\": \"\",\n        \"results\": {{\n\n            \n            \"0\": {{\"content\": \"y\"}}\n\n        }},\n        \"is_error\": null\n    }}\n\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>\
             <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>\n            \n                <|START_ACTION|>[\n\n    {{\"tool_call_id\": \"2\", \"tool_name\": \"again\", \"parameters\": {{\"k\": \"v\"}}}}\n\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>\
             <|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n    {{\n        \"tool_call_id\": \"0\",\n        \"results\": {{\n\n            \n            \"0\": {{\"content\": \"z\"}}\n\n        }},\n        \"is_error\": null\n    }}\n\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>{OPEN}",
            platform(""),
            user("go"),
        );
        assert_eq!(Cohere.render(&msgs, &[], None).unwrap(), want);
    }

    #[test]
    fn tools_print_as_template_json() {
        let tools = [
            json!({"type": "function", "function": {"name": "get_weather", "description": "Weather <now>",
                "parameters": {"type": "object", "required": ["city"],
                    "properties": {"city": {"type": "string", "description": "City"}}}}}),
            json!({"type": "function", "function": {"name": "ping"}}),
        ];
        let want = "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>S\n\n\n\n# Available Tools\n```json\n[\n\n    {\"name\": \"get_weather\", \"description\": \"Weather \\u003cnow\\u003e\", \"parameters\": {\"type\": \"object\", \"required\": [\"city\"], \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City\"}}}, \"responses\": null},\n\n\n    {\"name\": \"ping\", \"description\": \"\", \"parameters\": {\"type\": \"\", \"properties\": null}, \"responses\": null}\n\n\n]\n```<|END_TEXT|><|END_OF_TURN_TOKEN|>";
        let got = Cohere
            .render(&[msg("system", "S"), msg("user", "Hi")], &tools, None)
            .unwrap();
        assert_eq!(got, format!("{want}{}{OPEN}", user("Hi")));
    }
}
