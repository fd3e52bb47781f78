//! Nemotron 3 prompts (Ollama's `Nemotron3NanoRenderer`), serving the renderer names
//! `nemotron-3-nano` and `nemotron-3.5-nano` (`v35`).
//!
//! ChatML whose system block carries the first system message and the `# Tools` section
//! ([`nemotron_tools`](super::nemotron_tools)); assistant turns always carry a `<think>` block
//! (the message's thinking, else an empty one), and turns before the last user message lose
//! their reasoning; assistant tool calls print as `<tool_call><function=…><parameter=…>` XML;
//! consecutive tool results share one user turn of `<tool_response>` blocks. The prompt ends
//! opening the assistant's `<think>` (thinking on: the request's `think`, unset = on) or with an
//! empty `<think></think>`.
//!
//! 3 vs 3.5: 3 reads `/think` and `/no_think` in user and system messages as switches (the last
//! one wins), deletes them, and trims user/system content; 3.5 leaves content alone, ignores the
//! switches, writes the thinking block as `<think>\n…</think>` without the newline after, and a
//! `think: "medium"` request adds `{reasoning effort: efficient}` to the last user message.

use serde_json::Value as J;

use super::nemotron_tools::{arg_value, tools_block};
use super::{image_tags, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

pub struct Nemotron3Nano {
    pub v35: bool,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Deletes `/think` and `/no_think`, sparing the `/think` inside a real `</think>`.
fn strip_toggles(s: &str) -> String {
    s.replace(CLOSE, "<_end_think>")
        .replace("/think", "")
        .replace("/no_think", "")
        .replace("<_end_think>", CLOSE)
}

impl Nemotron3Nano {
    fn thinking(&self, messages: &[Message], think: Option<&Think>) -> bool {
        let mut on = think.is_none_or(Think::enabled);
        if self.v35 {
            return on;
        }
        for m in messages
            .iter()
            .filter(|m| m.role == "user" || m.role == "system")
        {
            if m.content.replace(CLOSE, "").contains("/think") {
                on = true;
            } else if m.content.contains("/no_think") {
                on = false;
            }
        }
        on
    }

    /// The assistant text with its thinking block in front.
    fn with_thinking(&self, m: &Message) -> String {
        match m.thinking.as_deref() {
            Some(t) if !t.is_empty() && self.v35 => format!("{OPEN}\n{t}{CLOSE}{}", m.content),
            Some(t) if !t.is_empty() => format!("{OPEN}\n{t}\n{CLOSE}\n{}", m.content),
            _ if !m.content.contains(OPEN) && !m.content.contains(CLOSE) => {
                format!("{OPEN}{CLOSE}{}", m.content)
            }
            _ => m.content.clone(),
        }
    }
}

/// An assistant turn without tool calls; `truncate` (before the last user message) keeps only
/// what follows the last `</think>` when the content has a full think block.
fn answer(content: &str, truncate: bool) -> String {
    if truncate && content.contains(OPEN) && content.contains(CLOSE) {
        let tail = content.rsplit(CLOSE).next().unwrap_or("");
        return format!("{OPEN}{CLOSE}{tail}").trim().to_string();
    }
    content.trim().to_string()
}

/// The text before an assistant turn's tool calls.
fn before_calls(content: &str, truncate: bool) -> String {
    if content.trim().is_empty() {
        return format!("{OPEN}{CLOSE}");
    }
    if !truncate {
        return format!("{}\n", content.trim());
    }
    let c = if content.contains(CLOSE) {
        content.rsplit(CLOSE).next().unwrap_or("")
    } else if content.contains(OPEN) {
        content.split(OPEN).next().unwrap_or("")
    } else {
        content
    };
    format!("{OPEN}{CLOSE}{}\n", c.trim())
}

impl Renderer for Nemotron3Nano {
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let thinking = self.thinking(messages, think);
        let medium = self.v35 && matches!(think, Some(Think::Level(l)) if l == "medium");
        let (system, turns) = match messages.first() {
            Some(m) if m.role == "system" => (
                if self.v35 {
                    m.content.clone()
                } else {
                    strip_toggles(&m.content)
                },
                &messages[1..],
            ),
            _ => (String::new(), messages),
        };
        let last_user = turns.iter().rposition(|m| m.role == "user");

        let mut out = String::from("<|im_start|>system\n");
        out.push_str(&system);
        if !tools.is_empty() {
            if !system.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&tools_block(tools));
        }
        out.push_str("<|im_end|>\n");

        let mut offset = 0;
        for (i, m) in turns.iter().enumerate() {
            match m.role.as_str() {
                "assistant" => {
                    let content = self.with_thinking(m);
                    let truncate = last_user.is_some_and(|u| i < u);
                    out.push_str("<|im_start|>assistant\n");
                    if m.tool_calls.is_empty() {
                        out.push_str(&answer(&content, truncate));
                    } else {
                        out.push_str(&before_calls(&content, truncate));
                        for c in &m.tool_calls {
                            out.push_str(&format!("<tool_call>\n<function={}>\n", c.name));
                            for (k, v) in &c.arguments {
                                out.push_str(&format!(
                                    "<parameter={k}>\n{}\n</parameter>\n",
                                    arg_value(v)
                                ));
                            }
                            out.push_str("</function>\n</tool_call>\n");
                        }
                    }
                    out.push_str("<|im_end|>\n");
                }
                "user" | "system" => {
                    let (mut content, next) = image_tags(&m.content, m.images, offset);
                    offset = next;
                    if !self.v35 {
                        content = strip_toggles(&content).trim().to_string();
                    } else if m.role == "user" && Some(i) == last_user && medium {
                        content.push_str("\n\n{reasoning effort: efficient}");
                    }
                    out.push_str(&format!("<|im_start|>{}\n{content}<|im_end|>\n", m.role));
                }
                "tool" => {
                    let prev_tool = i > 0 && turns[i - 1].role == "tool";
                    let next_tool = turns.get(i + 1).is_some_and(|n| n.role == "tool");
                    let (content, next) = image_tags(&m.content, m.images, offset);
                    offset = next;
                    // A tool result with nothing before it opens no user turn.
                    if i > 0 && !prev_tool {
                        out.push_str("<|im_start|>user\n");
                    }
                    out.push_str(&format!("<tool_response>\n{content}\n</tool_response>\n"));
                    if !next_tool {
                        out.push_str("<|im_end|>\n");
                    }
                }
                role => out.push_str(&format!("<|im_start|>{role}\n{}<|im_end|>\n", m.content)),
            }
        }

        out.push_str(if thinking {
            "<|im_start|>assistant\n<think>\n"
        } else {
            "<|im_start|>assistant\n<think></think>"
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{calls as tool_calls, m, thought};
    use serde_json::json;

    fn calls(content: &str, thinking: &str, calls: &[(&str, J)]) -> Message {
        Message {
            tool_calls: tool_calls(calls),
            ..thought(content, thinking)
        }
    }

    const S: &str = "<|im_start|>system\n<|im_end|>\n";
    const GEN: &str = "<|im_start|>assistant\n<think>\n";
    const GEN_OFF: &str = "<|im_start|>assistant\n<think></think>";

    fn render(v35: bool, msgs: &[Message], think: Option<Think>) -> String {
        Nemotron3Nano { v35 }
            .render(msgs, &[], think.as_ref())
            .unwrap()
    }

    #[test]
    fn nano_conversations() {
        let on = Some(Think::Bool(true));
        let cases: Vec<(&str, Vec<Message>, Option<Think>, String)> = vec![
            ("single user, think unset = on", vec![m("user", "Hi")], None,
                format!("{S}<|im_start|>user\nHi<|im_end|>\n{GEN}")),
            ("think off", vec![m("user", "Hi")], Some(Think::Bool(false)),
                format!("{S}<|im_start|>user\nHi<|im_end|>\n{GEN_OFF}")),
            ("system trims nothing but toggles; user is trimmed", vec![m("system", " Sys /no_think "), m("user", "  Hi /think  ")], Some(Think::Bool(false)),
                format!("<|im_start|>system\n Sys  <|im_end|>\n<|im_start|>user\nHi<|im_end|>\n{GEN}")),
            ("last toggle wins, </think> is no toggle", vec![m("user", "a /think"), m("user", "b </think> /no_think")], on.clone(),
                format!("{S}<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb </think><|im_end|>\n{GEN_OFF}")),
            ("history before the last user loses reasoning", vec![m("user", "u1"), thought("a1", "t1"), m("user", "u2"), thought("a2", "t2")], on.clone(),
                format!("{S}<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n<think></think>\na1<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n<think>\nt2\n</think>\na2<|im_end|>\n{GEN}")),
            ("content think pairs: truncated keeps after the last close", vec![m("user", "u1"), m("assistant", "<think>a</think>mid<think>b</think> end "), m("assistant", "stray </think> tail"), m("user", "u2"), m("assistant", "<think>kept</think>tail")], on.clone(),
                format!("{S}<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n<think></think> end<|im_end|>\n<|im_start|>assistant\nstray </think> tail<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n<think>kept</think>tail<|im_end|>\n{GEN}")),
            ("empty and whitespace assistants", vec![m("user", "go"), m("assistant", ""), m("assistant", "   "), m("user", "again")], on.clone(),
                format!("{S}<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think></think><|im_end|>\n<|im_start|>assistant\n<think></think><|im_end|>\n<|im_start|>user\nagain<|im_end|>\n{GEN}")),
            ("tool calls with reasoning, tool runs, orphan tool", vec![
                m("tool", "orphan"),
                m("user", "go"),
                calls("checking", "decide", &[("lookup", json!({"q": "a", "n": 2, "deep": {"z": null, "a": [1.5]}}))]),
                m("tool", "one"), m("tool", "two"),
                calls("", "", &[("bare", json!({}))]),
                m("tool", "three"),
            ], on.clone(),
                format!("{S}<tool_response>\norphan\n</tool_response>\n<|im_end|>\n<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\ndecide\n</think>\nchecking\n<tool_call>\n<function=lookup>\n<parameter=q>\na\n</parameter>\n<parameter=n>\n2\n</parameter>\n<parameter=deep>\n{{\"a\": [1.5], \"z\": null}}\n</parameter>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n<think></think>\n<tool_call>\n<function=bare>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\n<tool_response>\nthree\n</tool_response>\n<|im_end|>\n{GEN}")),
            ("truncated tool-call turns", vec![
                m("user", "u1"),
                calls("<think>x</think> after ", "", &[("f", json!({}))]),
                calls("before <think>open", "", &[("g", json!({}))]),
                m("user", "u2"),
                calls("<think>y</think>z", "", &[("h", json!({}))]),
            ], on.clone(),
                format!("{S}<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n<think></think>after\n<tool_call>\n<function=f>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>assistant\n<think></think>before\n<tool_call>\n<function=g>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n<think>y</think>z\n<tool_call>\n<function=h>\n</function>\n</tool_call>\n<|im_end|>\n{GEN}")),
            ("later system and other roles", vec![m("user", "Hi"), m("system", " Second /think "), m("developer", " raw ")], Some(Think::Bool(false)),
                format!("{S}<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nSecond<|im_end|>\n<|im_start|>developer\n raw <|im_end|>\n{GEN}")),
            ("prefill is closed like any turn", vec![m("user", "go"), m("assistant", "partial")], on,
                format!("{S}<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think></think>partial<|im_end|>\n{GEN}")),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(render(false, &msgs, think), want, "{name}");
        }
    }

    #[test]
    fn v35_differences() {
        let medium = Some(Think::Level("medium".into()));
        let cases: Vec<(&str, Vec<Message>, Option<Think>, String)> = vec![
            ("toggles are text, content untrimmed", vec![m("system", " S /no_think "), m("user", " Hi /no_think ")], None,
                format!("<|im_start|>system\n S /no_think <|im_end|>\n<|im_start|>user\n Hi /no_think <|im_end|>\n{GEN}")),
            ("thinking block without the newline after", vec![m("user", "u"), thought("a", "t")], Some(Think::Bool(false)),
                format!("{S}<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n<think>\nt</think>a<|im_end|>\n{GEN_OFF}")),
            ("medium effort marks the last user message only", vec![m("user", "one"), m("assistant", "a"), m("user", "two")], medium,
                format!("{S}<|im_start|>user\none<|im_end|>\n<|im_start|>assistant\n<think></think>a<|im_end|>\n<|im_start|>user\ntwo\n\n{{reasoning effort: efficient}}<|im_end|>\n{GEN}")),
            ("think true is not medium", vec![m("user", "two")], Some(Think::Bool(true)),
                format!("{S}<|im_start|>user\ntwo<|im_end|>\n{GEN}")),
            ("high effort", vec![m("user", "two")], Some(Think::Level("high".into())),
                format!("{S}<|im_start|>user\ntwo<|im_end|>\n{GEN}")),
        ];
        for (name, msgs, think, want) in cases {
            assert_eq!(render(true, &msgs, think), want, "{name}");
        }
    }

    #[test]
    fn system_with_tools_and_images() {
        let tools = vec![json!({"type": "function", "function": {"name": "now"}})];
        let block = tools_block(&tools);
        let msgs = vec![
            m("system", "Sys"),
            Message {
                images: 2,
                ..m("user", "look")
            },
            m("assistant", "ok"),
            Message {
                images: 1,
                ..m("tool", "pic")
            },
            Message {
                images: 1,
                ..m("user", "[img] again")
            },
        ];
        let got = Nemotron3Nano { v35: false }
            .render(&msgs, &tools, None)
            .unwrap();
        assert_eq!(got, format!("<|im_start|>system\nSys\n\n{block}<|im_end|>\n<|im_start|>user\n[img-0][img-1] look<|im_end|>\n<|im_start|>assistant\n<think></think>ok<|im_end|>\n<|im_start|>user\n<tool_response>\n[img-2] pic\n</tool_response>\n<|im_end|>\n<|im_start|>user\n[img-3] again<|im_end|>\n{GEN}"));
        // No system message: the tools open the system block directly.
        let got = Nemotron3Nano { v35: true }
            .render(&[m("user", "go")], &tools, None)
            .unwrap();
        assert_eq!(
            got,
            format!("<|im_start|>system\n{block}<|im_end|>\n<|im_start|>user\ngo<|im_end|>\n{GEN}")
        );
        assert_eq!(Nemotron3Nano { v35: true }.leading_bos(), "");
    }
}
