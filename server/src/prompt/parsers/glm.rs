//! GLM output (Ollama's `GLM46Parser` and the two parsers built on it): the `PARSER` names
//! `glm-4.7` (`GLM47Parser`) and `glm-ocr` (`GlmOcrParser`).
//! - A response may open with `<think>` (whitespace around it dropped); `glm-4.7` with thinking
//!   on (unset or true) starts inside the thinking, since its prompt ends with `<think>`.
//! - Thinking runs to `</think>`; content runs to `<tool_call>`; a call runs to `</tool_call>`
//!   and its body is read by [`call`]. Whitespace around every tag is dropped.
//! - A response that ends inside a call is a call only if it is complete but for the closing tag,
//!   names a declared tool and has every required argument (`finalizeToolCall`).
//!
//! Go fails the whole request on a call it cannot read; herd, like its other tool parsers,
//! delivers that call's text as content instead. Text Go still holds at the end (trailing
//! whitespace, a partial tag, a lone `<think` or whitespace-only response) is dropped as Go drops
//! it. Tool names are checked only for unclosed calls, as in Go. `glm-ocr` reads thinking tags
//! the same way although Ollama lists it without thinking support.

mod call;

use super::deepseek3::after_thinking;
use super::{
    emit_certain, partial_tag_len, skip_space, thinking_close_if, Options, Parsed, Parser,
};
use crate::prompt::Think;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Waiting to see whether the response opens with `<think>`.
    Opening,
    Thinking,
    Content,
    Call,
}

pub struct Glm {
    state: State,
    buf: String,
    /// Leading whitespace of what follows is dropped.
    trim_lead: bool,
    schemas: Vec<serde_json::Value>,
    index: i64,
    starts_thinking: bool,
}

impl Glm {
    /// `glm-4.7`: inside the thinking unless the request turns it off (Go ignores any prefill;
    /// herd's two-pass thinking prefill starts in content, see [`after_thinking`]).
    pub fn glm47(o: &Options) -> Glm {
        Glm::new(o, o.think.is_none_or(Think::enabled) && !after_thinking(o))
    }

    /// `glm-ocr`: always watches for an opening `<think>`.
    pub fn glm_ocr(o: &Options) -> Glm {
        Glm::new(o, false)
    }

    fn new(o: &Options, thinking: bool) -> Glm {
        Glm {
            state: if thinking {
                State::Thinking
            } else {
                State::Opening
            },
            buf: String::new(),
            trim_lead: false,
            schemas: o.schemas.to_vec(),
            index: 0,
            starts_thinking: thinking,
        }
    }

    fn push_call(&mut self, out: &mut Parsed, (name, arguments): call::Call) {
        out.push_call(&mut self.index, name, arguments);
    }

    /// Emit what cannot be part of `tag` (held: a possible partial tag and the whitespace
    /// before it, which the tag would trim).
    fn emit_before(&mut self, tag: &str) -> String {
        let mut text = String::new();
        emit_certain(&mut self.buf, &[tag], &mut text);
        text
    }

    fn step(&mut self, out: &mut Parsed) -> bool {
        if self.trim_lead {
            if !skip_space(&mut self.buf) {
                return false;
            }
            self.trim_lead = false;
        }
        match self.state {
            State::Opening => {
                let t = self.buf.trim_start();
                if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                    self.buf = rest.to_string();
                    self.state = State::Thinking;
                    self.trim_lead = true;
                    true
                } else if THINK_OPEN.starts_with(t) {
                    false
                } else {
                    // No thinking: content from the first byte, leading whitespace included.
                    self.state = State::Content;
                    true
                }
            }
            State::Thinking => match self.buf.find(THINK_CLOSE) {
                Some(i) => {
                    out.thinking.push_str(self.buf[..i].trim_end());
                    self.buf.drain(..i + THINK_CLOSE.len());
                    self.state = State::Content;
                    self.trim_lead = true;
                    true
                }
                None => {
                    let t = self.emit_before(THINK_CLOSE);
                    out.thinking.push_str(&t);
                    false
                }
            },
            State::Content => match self.buf.find(CALL_OPEN) {
                Some(i) => {
                    out.content.push_str(self.buf[..i].trim_end());
                    self.buf.drain(..i + CALL_OPEN.len());
                    self.state = State::Call;
                    self.trim_lead = true;
                    true
                }
                None => {
                    let t = self.emit_before(CALL_OPEN);
                    out.content.push_str(&t);
                    false
                }
            },
            State::Call => {
                let Some(i) = self.buf.find(CALL_CLOSE) else {
                    return false;
                };
                let raw = self.buf[..i].trim_end().to_string();
                self.buf.drain(..i + CALL_CLOSE.len());
                self.state = State::Content;
                self.trim_lead = true;
                match call::parse(&raw, &self.schemas) {
                    Some(c) => self.push_call(out, c),
                    None => out
                        .content
                        .push_str(&format!("{CALL_OPEN}{raw}{CALL_CLOSE}")),
                }
                true
            }
        }
    }

    /// The output ended inside a call.
    fn finish_call(&mut self, out: &mut Parsed) {
        let text = std::mem::take(&mut self.buf);
        let partial = partial_tag_len(&text, &[CALL_CLOSE]);
        let raw = match partial {
            0 => text.as_str(),
            n => text[..text.len() - n].trim_end(),
        };
        match call::parse_unclosed(raw, &self.schemas) {
            Some(c) => self.push_call(out, c),
            None => {
                out.content.push_str(CALL_OPEN);
                out.content.push_str(&text);
            }
        }
        self.state = State::Content;
    }
}

impl Parser for Glm {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out) {}
        if done {
            if self.state == State::Call {
                self.finish_call(&mut out);
            }
            self.buf.clear();
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, THINK_CLOSE)
    }
}

#[cfg(test)]
mod tests {
    use super::call::tests::schemas;
    use super::*;
    use crate::prompt::parsers::testutil;

    fn glm47(think: Option<Think>) -> Glm {
        let s = schemas();
        Glm::glm47(&Options {
            think: think.as_ref(),
            schemas: &s,
            ..Default::default()
        })
    }

    fn ocr() -> Glm {
        let s = schemas();
        Glm::glm_ocr(&Options {
            schemas: &s,
            ..Default::default()
        })
    }

    fn check(mk: fn() -> Glm, text: &str, want: (&str, &str, &[(&str, &str)])) {
        testutil::check(mk, text, want);
    }

    #[test]
    fn init() {
        assert_eq!(glm47(None).thinking_close(), ["</think>"]);
        assert_eq!(
            glm47(Some(Think::Bool(true))).thinking_close(),
            ["</think>"]
        );
        assert!(glm47(Some(Think::Bool(false))).thinking_close().is_empty());
        assert!(ocr().thinking_close().is_empty());
        // A content prefill does not matter to Go; herd's two-pass thinking prefill does.
        let s = schemas();
        let prefill = crate::prompt::Message::new("assistant", "So");
        let o = Options {
            last: Some(&prefill),
            schemas: &s,
            ..Default::default()
        };
        assert_eq!(Glm::glm47(&o).thinking_close(), ["</think>"]);
        let thought = crate::prompt::Message {
            thinking: Some(String::new()),
            ..crate::prompt::Message::new("assistant", "")
        };
        let o = Options {
            last: Some(&thought),
            ..o
        };
        assert!(Glm::glm47(&o).thinking_close().is_empty());
    }

    #[test]
    fn glm47_thinks_then_calls() {
        let text = "\nThe user wants weather. \n</think>\n\nLet me check. <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key><arg_value>3</arg_value>\n</tool_call>\n<tool_call>other<arg_key>x</arg_key><arg_value>1</arg_value></tool_call> Done. \n";
        check(
            || glm47(None),
            text,
            (
                "Let me check.Done.",
                "\nThe user wants weather.",
                &[
                    ("get_weather", r#"{"city":"Paris","days":3}"#),
                    ("other", r#"{"x":"1"}"#),
                ],
            ),
        );
    }

    #[test]
    fn opening_tag_is_optional() {
        let off = || glm47(Some(Think::Bool(false)));
        check(off, "  <think> hmm </think> hi", ("hi", "hmm", &[]));
        check(
            off,
            "  plain <think>x</think>",
            ("  plain <think>x</think>", "", &[]),
        );
        // Nothing but (part of) the opening tag: Go delivers nothing.
        check(off, " <thin", ("", "", &[]));
        check(ocr, "<think></think>\n\nText", ("Text", "", &[]));
    }

    #[test]
    fn unreadable_calls_are_content() {
        check(
            ocr,
            "A <tool_call> <arg_key>k</arg_key><arg_value>v</arg_value> </tool_call> B",
            (
                "A<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>B",
                "",
                &[],
            ),
        );
    }

    #[test]
    fn unclosed_calls_at_the_end() {
        check(
            ocr,
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>\n</tool_c",
            ("", "", &[("get_weather", r#"{"city":"Rome"}"#)]),
        );
        // Missing a required argument: the text is delivered instead.
        check(
            ocr,
            "ok<tool_call>get_weather<arg_key>days</arg_key><arg_value>1</arg_value>",
            (
                "ok<tool_call>get_weather<arg_key>days</arg_key><arg_value>1</arg_value>",
                "",
                &[],
            ),
        );
        check(ocr, "x <tool_call>  ", ("x<tool_call>", "", &[]));
    }

    #[test]
    fn trailing_whitespace_and_partial_tags_are_held() {
        let mut p = ocr();
        assert_eq!(p.add("Hi", false).content, "Hi");
        assert_eq!(p.add(" <tool", false).content, "");
        assert_eq!(p.add("box> ", false).content, " <toolbox>");
        // Go never delivers what it still holds at the end.
        assert_eq!(p.add("", true).content, "");
    }
}
