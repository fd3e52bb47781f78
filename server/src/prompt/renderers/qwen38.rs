//! What the `qwen3.8` renderer name adds to the Qwen 3.5 format ([`super::qwen35`]), as Ollama's
//! `qwen35Renderer38` variant does:
//! - Qwen 3.8 takes one leading system turn and has no developer role: every system and
//!   developer message (trimmed, empty ones skipped) is folded, in order, into one system message
//!   placed first, blank-line separated; a chat whose only instruction is already the leading
//!   system message is left as it is.
//! - Reasoning effort from the request's `think`: unset → the "xhigh" guidance, `low` → the "low"
//!   guidance, `high`/`max` → "xhigh", `true`/`medium`/`false` → none; it opens the system turn.
//! - A conversation must have a message, a user query (not only `<tool_response>` blocks), and no
//!   images on instruction messages; otherwise rendering fails (Ollama answers 500).
//!
//! Its prompts are tested with the Qwen 3.5 format's table (`qwen35_tests.rs`).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::prompt::{Message, Think};

const XHIGH: &str = "Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final answer.";
const LOW: &str = "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to the conclusion without unnecessary elaboration.";

fn is_instruction(m: &Message) -> bool {
    m.role == "system" || m.role == "developer"
}

/// The messages with every system/developer message folded into one leading system message.
pub(super) fn fold_instructions(messages: &[Message]) -> Result<Cow<'_, [Message]>> {
    let mut count = 0;
    let mut texts = Vec::new();
    for m in messages.iter().filter(|m| is_instruction(m)) {
        if m.images > 0 {
            return Err(Error::Internal(format!(
                "{} message cannot contain images",
                m.role
            )));
        }
        count += 1;
        let t = m.content.trim();
        if !t.is_empty() {
            texts.push(t);
        }
    }
    if count == 0 || (count == 1 && messages[0].role == "system") {
        return Ok(Cow::Borrowed(messages));
    }
    let mut folded = vec![Message::new("system", &texts.join("\n\n"))];
    folded.extend(messages.iter().filter(|m| !is_instruction(m)).cloned());
    Ok(Cow::Owned(folded))
}

/// The conversation checks Qwen 3.8 renders only after.
pub(super) fn check(messages: &[Message]) -> Result<()> {
    // (Images on the leading system message were refused by `fold_instructions` already.)
    let fail = |s: &str| Err(Error::Internal(s.to_string()));
    if messages.is_empty() {
        return fail("no messages provided");
    }
    if !messages
        .iter()
        .any(|m| m.role == "user" && !super::qwen35::is_tool_response(m))
    {
        return fail("no user query found in messages");
    }
    Ok(())
}

/// The reasoning-effort guidance for the request's `think` ("" for none).
pub(super) fn effort(think: Option<&Think>) -> Result<&'static str> {
    let Some(t) = think else {
        return Ok(XHIGH);
    };
    if let Think::Level(l) = t {
        if !t.enabled() {
            return Err(Error::Internal(format!("invalid thinking value {l}")));
        }
    }
    if !t.enabled() {
        return Ok("");
    }
    Ok(match t.level().as_str() {
        "low" => LOW,
        "high" | "max" => XHIGH,
        _ => "",
    })
}

#[cfg(test)]
mod tests {
    use super::super::qwen35::tests::messages;
    use super::*;
    use serde_json::json;

    #[test]
    fn qwen38_refuses_what_ollama_refuses() {
        let cases = [
            ("no messages", json!([]), None, "no messages provided"),
            (
                "only tool results",
                json!([
                    {"role": "user", "content": "<tool_response>x</tool_response>"},
                    {"role": "tool", "content": "y"}
                ]),
                None,
                "no user query found in messages",
            ),
            (
                "images on a developer message",
                json!([
                    {"role": "developer", "content": "d", "images": 1},
                    {"role": "user", "content": "q"}
                ]),
                None,
                "developer message cannot contain images",
            ),
            (
                "images on the system message",
                json!([
                    {"role": "system", "content": "s", "images": 1},
                    {"role": "user", "content": "q"}
                ]),
                None,
                "system message cannot contain images",
            ),
            (
                "unknown think level",
                json!([
                    {"role": "user", "content": "q"}
                ]),
                Some(Think::Level("extreme".into())),
                "invalid thinking value extreme",
            ),
        ];
        let r = super::super::for_name("qwen3.8").unwrap();
        for (name, msgs, think, want) in cases {
            match r.render(&messages(&msgs), &[], think.as_ref()) {
                Err(Error::Internal(e)) => assert_eq!(e, want, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
