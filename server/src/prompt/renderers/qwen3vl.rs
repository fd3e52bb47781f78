//! The `qwen3-vl-instruct` and `qwen3-vl-thinking` renderers (Ollama's `Qwen3VLRenderer`,
//! Qwen3-VL models on ollama.com): ChatML with the tools as spaced JSON lines in the system turn,
//! assistant calls as `<tool_call>` JSON, images as `[img-N]` tags, and `<think>` blocks.
//!
//! Rules (Ollama's, reproduced byte for byte):
//! - thinking is on for `qwen3-vl-thinking` and off for `-instruct` unless the request's `think`
//!   says otherwise (either way round);
//! - only a first message with role system is the system turn (merged into the tools turn when
//!   there are tools); a later system message renders as its own turn, other unknown roles not
//!   at all (their images still count);
//! - with thinking on, an assistant message after the last real user query (a user message that
//!   is not just a `<tool_response>` block) shows its thinking in `<think>…</think>` when it has
//!   some or is the last message; earlier ones show content only;
//! - a final assistant message is continued (no end tag); otherwise the prompt ends with an
//!   assistant turn, opened with `<think>\n` when thinking is on.

use serde_json::Value as J;

use super::{image_tags, json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

/// `qwen3-vl-instruct` (`thinking: false`) and `qwen3-vl-thinking` (`thinking: true`).
pub struct Qwen3Vl {
    pub thinking: bool,
}

const TOOLS_INTRO: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";

const TOOLS_OUTRO: &str = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

impl Renderer for Qwen3Vl {
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let thinking = think.map_or(self.thinking, Think::enabled);
        let system = messages.first().filter(|m| m.role == "system");
        let mut out = String::new();
        if !tools.is_empty() {
            out.push_str("<|im_start|>system\n");
            if let Some(s) = system {
                out.push_str(&s.content);
                out.push_str("\n\n");
            }
            out.push_str(TOOLS_INTRO);
            for t in tools {
                out.push('\n');
                out.push_str(&json::with_spaces(&json::go(&json::tool(t))));
            }
            out.push_str(TOOLS_OUTRO);
        } else if let Some(s) = system {
            out.push_str("<|im_start|>system\n");
            out.push_str(&s.content);
            out.push_str("<|im_end|>\n");
        }

        // The last user message that is a real query, not a tool response block.
        let last_query = messages
            .iter()
            .rposition(|m| {
                let (c, _) = image_tags(&m.content, m.images, 0);
                m.role == "user"
                    && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))
            })
            .unwrap_or(messages.len().saturating_sub(1));

        let mut offset = 0;
        for (i, m) in messages.iter().enumerate() {
            let (content, next) = image_tags(&m.content, m.images, offset);
            offset = next;
            let last = i + 1 == messages.len();
            let prefill = last && m.role == "assistant";
            match m.role.as_str() {
                "user" => turn(&mut out, "user", &content),
                "system" if i != 0 => turn(&mut out, "system", &content),
                "assistant" => {
                    let reasoning = match (thinking, &m.thinking) {
                        (true, Some(t)) => t.as_str(),
                        _ => "",
                    };
                    out.push_str("<|im_start|>assistant\n");
                    if thinking && i > last_query && (last || !reasoning.is_empty()) {
                        out.push_str("<think>\n");
                        out.push_str(reasoning.trim_matches('\n'));
                        if !content.is_empty() {
                            out.push_str("\n</think>\n\n");
                            out.push_str(content.trim_start_matches('\n'));
                        }
                    } else {
                        out.push_str(&content);
                    }
                    for (j, c) in m.tool_calls.iter().enumerate() {
                        if j > 0 || !content.is_empty() {
                            out.push('\n');
                        }
                        out.push_str("<tool_call>\n{\"name\": \"");
                        out.push_str(&c.name);
                        out.push_str("\", \"arguments\": ");
                        out.push_str(&json::with_spaces(&json::go(&json::arguments(
                            &c.arguments,
                        ))));
                        out.push_str("}\n</tool_call>");
                    }
                    if !prefill {
                        out.push_str("<|im_end|>\n");
                    }
                }
                "tool" => {
                    if i == 0 || messages[i - 1].role != "tool" {
                        out.push_str("<|im_start|>user");
                    }
                    out.push_str("\n<tool_response>\n");
                    out.push_str(&content);
                    out.push_str("\n</tool_response>");
                    if last || messages[i + 1].role != "tool" {
                        out.push_str("<|im_end|>\n");
                    }
                }
                _ => {}
            }
            if last && !prefill {
                out.push_str("<|im_start|>assistant\n");
                if thinking {
                    out.push_str("<think>\n");
                }
            }
        }
        Ok(out)
    }
}

fn turn(out: &mut String, role: &str, content: &str) {
    out.push_str("<|im_start|>");
    out.push_str(role);
    out.push('\n');
    out.push_str(content);
    out.push_str("<|im_end|>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{calls, m as msg, thought};
    use serde_json::json;

    const INSTRUCT: Qwen3Vl = Qwen3Vl { thinking: false };
    const THINKING: Qwen3Vl = Qwen3Vl { thinking: true };

    fn with_calls(content: &str, list: &[(&str, J)]) -> Message {
        Message {
            tool_calls: calls(list),
            ..msg("assistant", content)
        }
    }

    fn images(role: &str, content: &str, n: usize) -> Message {
        Message {
            images: n,
            ..msg(role, content)
        }
    }

    #[test]
    fn turns_and_thinking_follow_ollama() {
        let on = Think::Bool(true);
        let off = Think::Bool(false);
        let story = || {
            vec![
                msg("user", "Tell a story."),
                thought("abc", "\nPoetry.\n"),
                msg("user", "Weather?"),
                thought("", "Sun."),
            ]
        };
        type Case<'a> = (
            &'a str,
            &'a Qwen3Vl,
            Option<&'a Think>,
            Vec<Message>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            ("empty", &THINKING, None, vec![], ""),
            (
                "system first, thinking opens the answer",
                &THINKING,
                None,
                vec![msg("system", "Be brief."), msg("user", "Hi")],
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n",
            ),
            (
                "instruct: no think tag",
                &INSTRUCT,
                None,
                vec![msg("user", "Hi")],
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
            ),
            (
                "think overrides the variant both ways",
                &INSTRUCT,
                Some(&on),
                vec![msg("user", "Hi")],
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n",
            ),
            (
                "think false",
                &THINKING,
                Some(&off),
                vec![msg("user", "Hi"), thought("Hello", "hmm")],
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello",
            ),
            (
                "later system renders, other roles do not",
                &INSTRUCT,
                None,
                vec![msg("user", "a"), msg("system", "s"), msg("developer", "d")],
                "<|im_start|>user\na<|im_end|>\n<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\n",
            ),
            (
                "old thinking dropped, the last message's kept and continued",
                &THINKING,
                None,
                story(),
                "<|im_start|>user\nTell a story.<|im_end|>\n<|im_start|>assistant\nabc<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nSun.",
            ),
            (
                "prefill with thinking and content",
                &THINKING,
                None,
                vec![msg("user", "Q"), thought("\n\nabc", "\nx\n\n")],
                "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\nabc",
            ),
            (
                "instruct ignores thinking",
                &INSTRUCT,
                None,
                story(),
                "<|im_start|>user\nTell a story.<|im_end|>\n<|im_start|>assistant\nabc<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n",
            ),
            (
                "after the last query: thinking shown when present, closed turns",
                &THINKING,
                None,
                vec![
                    msg("user", "Q"),
                    Message {
                        thinking: Some("plan".into()),
                        ..with_calls("", &[("f", json!({}))])
                    },
                    msg("user", "<tool_response>\n1\n</tool_response>"),
                    msg("assistant", "no thinking"),
                    msg("user", "<tool_response>2</tool_response>"),
                ],
                "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nplan<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n<|im_start|>assistant\nno thinking<|im_end|>\n<|im_start|>user\n<tool_response>2</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n",
            ),
            (
                "no real query: the last index is the query, nothing comes after it",
                &THINKING,
                None,
                vec![thought("a", "t1"), thought("b", "t2")],
                "<|im_start|>assistant\na<|im_end|>\n<|im_start|>assistant\nb",
            ),
        ];
        for (name, r, think, msgs, want) in cases {
            assert_eq!(r.render(&msgs, &[], think).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn tools_calls_and_results() {
        let tool = json!({"type": "function", "function": {"name": "get_weather",
            "description": "Weather <now>", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"], "type": "string"}},
            "required": ["city"]}}});
        let msgs = vec![
            msg("system", "Sys."),
            msg("user", "Paris and Rome?"),
            with_calls(
                "Checking.",
                &[
                    (
                        "get_weather",
                        json!({"city": "Paris", "opts": {"z": 1, "a": [1.5, "x, y"]}}),
                    ),
                    ("get_weather", json!({"city": "Rome"})),
                ],
            ),
            msg("tool", "20"),
            msg("tool", "25"),
            with_calls("", &[("get_weather", json!({"city": "Oslo"}))]),
        ];
        let want = "<|im_start|>system\nSys.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather \\u003cnow\\u003e\", \"parameters\": {\"type\": \"object\", \"required\": [\"city\"], \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nParis and Rome?<|im_end|>\n<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"opts\": {\"a\": [1.5, \"x, y\"], \"z\": 1}}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n20\n</tool_response>\n<tool_response>\n25\n</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
        assert_eq!(
            INSTRUCT
                .render(&msgs, std::slice::from_ref(&tool), None)
                .unwrap(),
            want
        );
        // Without a leading system message the tools turn has no system text.
        let got = INSTRUCT
            .render(&[msg("user", "Hi")], &[tool], None)
            .unwrap();
        assert!(got.starts_with("<|im_start|>system\n# Tools\n\n"), "{got}");
        assert!(got.ends_with(
            "</tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        ));
    }

    #[test]
    fn images_are_numbered_across_the_conversation() {
        let msgs = vec![
            images("system", "Look.", 1),
            images("user", "What is [img] here?", 2),
            images("assistant", "A cat.", 0),
            images("tool", "shot", 1),
            images("developer", "x", 1),
            images("user", "And this?", 1),
        ];
        let want = "<|im_start|>system\nLook.<|im_end|>\n<|im_start|>user\n[img-2] What is [img-1] here?<|im_end|>\n<|im_start|>assistant\nA cat.<|im_end|>\n<|im_start|>user\n<tool_response>\n[img-3] shot\n</tool_response><|im_end|>\n<|im_start|>user\n[img-5] And this?<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(INSTRUCT.render(&msgs, &[], None).unwrap(), want);
        // An image makes a tool-response-looking user message a real query.
        let msgs = vec![
            msg("user", "Q"),
            thought("a", "t"),
            images("user", "<tool_response>x</tool_response>", 1),
            thought("b", "u"),
            msg("user", "<tool_response>y</tool_response>"),
        ];
        let got = THINKING.render(&msgs, &[], None).unwrap();
        assert!(got.contains("<|im_start|>assistant\na<|im_end|>"), "{got}");
        assert!(
            got.contains("<|im_start|>assistant\n<think>\nu\n</think>\n\nb<|im_end|>"),
            "{got}"
        );
        assert_eq!(THINKING.leading_bos(), "");
    }
}
