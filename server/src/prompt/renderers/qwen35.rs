//! The Qwen 3.5 prompt format (Ollama's `Qwen35Renderer`), serving the renderer names `qwen3.5`,
//! `qwen3.8` and `ornith`: ChatML turns (`<|im_start|>role\n…<|im_end|>\n`), tools as
//! space-separated JSON lines inside `<tools>` in the system turn with the XML calling
//! instructions, assistant calls as `<tool_call>\n<function=…>\n<parameter=…>…`, tool results
//! grouped into one user turn of `<tool_response>` blocks, `<think>` blocks on assistant turns
//! after the last real user query, and a generation prompt that opens (or, thinking off, closes
//! empty) the thinking block. Images are `[img-N]` tags ([`super::image_tags`]).
//!
//! The three names differ only in flags: `ornith` always prints an assistant turn's think block;
//! `qwen3.8` also does, folds system/developer messages into one leading system turn, adds
//! reasoning-effort guidance for the request's `think`, checks the conversation and keeps
//! unknown roles ([`super::qwen38`]).

use std::borrow::Cow;

use serde_json::Value as J;

use super::{image_tags, json, qwen38, Renderer};
use crate::error::Result;
use crate::prompt::gotmpl::format_float_g;
use crate::prompt::{Message, Think};

const IM_START: &str = "<|im_start|>";
/// A turn's end.
const END: &str = "<|im_end|>\n";

const TOOLS_PREAMBLE: &str = "# Tools\n\nYou have access to the following functions:\n\n<tools>";

const TOOLS_POSTAMBLE: &str = "
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>";

/// One of the Qwen 3.5 format's variants.
#[derive(Debug, Clone, Copy)]
pub struct Qwen35 {
    /// Thinking when the request leaves `think` unset.
    thinking: bool,
    /// The `qwen3.8` rules (see the module header).
    v38: bool,
    /// Every assistant turn gets a think block, not only those after the last user query.
    always_think_block: bool,
    /// Thinking off: the generation prompt carries an empty, closed think block.
    empty_think_when_off: bool,
}

impl Qwen35 {
    /// `qwen3.5`.
    pub fn v35() -> Qwen35 {
        Qwen35 {
            thinking: true,
            v38: false,
            always_think_block: false,
            empty_think_when_off: true,
        }
    }

    /// `qwen3.8`.
    pub fn v38() -> Qwen35 {
        Qwen35 {
            v38: true,
            always_think_block: true,
            ..Qwen35::v35()
        }
    }

    /// `ornith`.
    pub fn ornith() -> Qwen35 {
        Qwen35 {
            always_think_block: true,
            ..Qwen35::v35()
        }
    }
}

/// A message's content with its image tags, trimmed; and the next image number.
fn content(m: &Message, offset: usize) -> (String, usize) {
    let (c, next) = image_tags(&m.content, m.images, offset);
    (c.trim().to_string(), next)
}

/// A user message that only carries tool results (some clients send them this way).
pub(super) fn is_tool_response(m: &Message) -> bool {
    let (c, _) = content(m, 0);
    c.starts_with("<tool_response>") && c.ends_with("</tool_response>")
}

/// An assistant turn's reasoning and the content that remains. The message's own `thinking`
/// wins when the turn prints a think block; otherwise (except for `qwen3.8`) reasoning written
/// inline as `<think>…</think>` is cut out of the content (and dropped when no block prints).
fn split_reasoning(content: &str, thinking: &str, block: bool, inline: bool) -> (String, String) {
    if block && !thinking.is_empty() {
        return (thinking.trim().to_string(), content.to_string());
    }
    if !inline {
        return (String::new(), content.to_string());
    }
    match content.find("</think>") {
        Some(i) => {
            let before = &content[..i];
            let reasoning = before
                .rfind("<think>")
                .map_or(before, |o| &before[o + "<think>".len()..]);
            let rest = content[i + "</think>".len()..].trim_start_matches('\n');
            (reasoning.trim().to_string(), rest.to_string())
        }
        None => (String::new(), content.to_string()),
    }
}

/// A call argument as Ollama prints it: strings raw, objects and arrays as Go JSON, other values
/// as Go's `%v` of the decoded value (numbers are float64: `1e+06`).
fn argument(v: &J) -> String {
    match v {
        J::Null => "null".into(),
        J::String(s) => s.clone(),
        J::Bool(b) => b.to_string(),
        J::Number(n) => format_float_g(n.as_f64().unwrap_or(0.0)),
        J::Array(_) | J::Object(_) => json::go(&json::any(v)),
    }
}

impl Qwen35 {
    /// The system turn's text, if one prints: the effort guidance, the tools, the system
    /// message, blank-line separated.
    fn system_turn(&self, messages: &[Message], tools: &[J], effort: &str) -> Option<String> {
        let system = messages
            .first()
            .filter(|m| m.role == "system")
            .map(|m| content(m, 0).0);
        let text = system.clone().unwrap_or_default();
        let join = |parts: &[&str]| {
            let parts: Vec<&str> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
            parts.join("\n\n")
        };
        if !tools.is_empty() {
            let mut list = TOOLS_PREAMBLE.to_string();
            for t in tools {
                list.push('\n');
                list.push_str(&json::with_spaces(&json::go(&json::tool(t))));
            }
            list.push_str(TOOLS_POSTAMBLE);
            Some(join(&[effort, &list, &text]))
        } else if (system.is_some() && !self.v38) || !text.is_empty() || !effort.is_empty() {
            Some(join(&[effort, &text]))
        } else {
            None
        }
    }

    fn assistant_turn(&self, out: &mut String, m: &Message, content: &str, block: bool) {
        let (reasoning, content) = split_reasoning(
            content,
            m.thinking.as_deref().unwrap_or(""),
            block,
            !self.v38,
        );
        out.push_str(&format!("{IM_START}assistant\n"));
        if block {
            out.push_str(&format!("<think>\n{reasoning}\n</think>\n\n"));
        }
        out.push_str(&content);
        for (j, call) in m.tool_calls.iter().enumerate() {
            if j > 0 {
                out.push('\n');
            } else if !content.trim().is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&format!("<tool_call>\n<function={}>\n", call.name));
            for (name, value) in &call.arguments {
                out.push_str(&format!(
                    "<parameter={name}>\n{}\n</parameter>\n",
                    argument(value)
                ));
            }
            out.push_str("</function>\n</tool_call>");
        }
    }
}

impl Renderer for Qwen35 {
    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let messages: Cow<[Message]> = if self.v38 {
            qwen38::fold_instructions(messages)?
        } else {
            Cow::Borrowed(messages)
        };
        let effort = if self.v38 {
            qwen38::check(&messages)?;
            qwen38::effort(think)?
        } else {
            ""
        };
        let thinking = think.map_or(self.thinking, Think::enabled);

        let mut out = String::new();
        if let Some(system) = self.system_turn(&messages, tools, effort) {
            out.push_str(&format!("{IM_START}system\n{system}{END}"));
        }

        // The last user message that is a real query, not tool results; assistant turns after
        // it (the current tool-calling round) keep their reasoning.
        let last_query = messages
            .iter()
            .rposition(|m| m.role == "user" && !is_tool_response(m))
            .unwrap_or(messages.len().saturating_sub(1));

        let mut offset = 0;
        for (i, m) in messages.iter().enumerate() {
            let (text, next) = content(m, offset);
            offset = next;
            let last = i + 1 == messages.len();
            let prefill = last && m.role == "assistant";
            match m.role.as_str() {
                "assistant" => {
                    let block = self.always_think_block || (thinking && i > last_query);
                    self.assistant_turn(&mut out, m, &text, block);
                    if !prefill {
                        out.push_str(END);
                    }
                }
                "tool" => {
                    if i == 0 || messages[i - 1].role != "tool" {
                        out.push_str(&format!("{IM_START}user"));
                    }
                    out.push_str(&format!("\n<tool_response>\n{text}\n</tool_response>"));
                    if last || messages[i + 1].role != "tool" {
                        out.push_str(END);
                    }
                }
                "system" if i == 0 => {}
                // Other roles: qwen3.8 prints them as they are, the others drop them.
                role if role == "user" || role == "system" || self.v38 => {
                    out.push_str(&format!("{IM_START}{role}\n{text}{END}"));
                }
                _ => {}
            }
            if last && !prefill {
                out.push_str(&format!("{IM_START}assistant\n"));
                if thinking {
                    out.push_str("<think>\n");
                } else if self.empty_think_when_off {
                    out.push_str("<think>\n\n</think>\n\n");
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "qwen35_tests.rs"]
pub(super) mod tests;
