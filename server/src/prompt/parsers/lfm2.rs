//! Liquid LFM2 output (Ollama's `LFM2Parser`), serving the parser names `lfm2` (tools) and
//! `lfm2-thinking` (tools and thinking).
//!
//! Thinking needs the thinking variant and a request `think` that is on (unset is off), and no
//! prefill with content. The model then decides per turn: a response that begins (after
//! whitespace) with `<think>` thinks until `</think>` (whitespace trimmed around the thinking
//! and after the tag; one repeated `<think>` right after the first is dropped); anything else
//! is a direct answer. Content carries tool calls in
//! `<|tool_call_start|>[name(key=value, …)]<|tool_call_end|>` ([`lfm2_calls`](super::lfm2_calls));
//! content before a call loses its trailing whitespace, content after it its leading
//! whitespace.
//!
//! As in Ollama: a call body that does not parse stops the parser (it only logs, and never
//! looks past that call again), so nothing after it is delivered; a call the response never
//! closes is dropped; thinking still open at the end loses its trailing whitespace and any
//! partial `</think>`. Ollama's fallback for bare calls without the tags only sees the final
//! chunk's content, which is empty when a response streams (herd ends with `add("", true)`, as
//! Ollama's runner ends with an empty done chunk), so it never applies and is not reproduced.

use super::lfm2_calls::{parse_calls, CALL_END, CALL_START};
use super::{emit_certain, partial_tag_len, skip_space, thinking_close_if, Parsed, Parser};
use crate::prompt::Think;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Thinking allowed: waiting to see whether the response opens `<think>`.
    Looking,
    /// Just after `<think>`: a second `<think>` is dropped.
    ThinkStart,
    /// Dropping whitespace before the thinking.
    ThinkTrim,
    Thinking,
    Content,
    Calls,
    /// A call body failed to parse: Ollama delivers nothing more.
    Stuck,
}

pub struct Lfm2 {
    state: State,
    buf: String,
    /// Content's leading whitespace is dropped (after `</think>` or a call).
    lead_trim: bool,
    index: i64,
    starts_thinking: bool,
}

impl Lfm2 {
    /// `thinking_variant`: `lfm2-thinking`; `prefilled`: the response continues an assistant
    /// message that has content.
    pub fn new(thinking_variant: bool, think: Option<&Think>, prefilled: bool) -> Lfm2 {
        let starts_thinking = thinking_variant && think.is_some_and(Think::enabled) && !prefilled;
        Lfm2 {
            state: if starts_thinking {
                State::Looking
            } else {
                State::Content
            },
            buf: String::new(),
            lead_trim: false,
            index: 0,
            starts_thinking,
        }
    }

    /// One transition; false when the buffer must wait for more text.
    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        match self.state {
            State::Looking => {
                let t = self.buf.trim_start();
                if let Some(rest) = t.strip_prefix(OPEN) {
                    self.buf = rest.to_string();
                    self.state = State::ThinkStart;
                } else if !done && (t.is_empty() || OPEN.starts_with(t)) {
                    return false;
                } else {
                    self.buf = t.to_string();
                    self.state = State::Content;
                }
            }
            State::ThinkStart => {
                if let Some(rest) = self.buf.strip_prefix(OPEN) {
                    self.buf = rest.to_string();
                } else if !done && OPEN.starts_with(self.buf.as_str()) {
                    return false;
                }
                self.state = State::ThinkTrim;
            }
            State::ThinkTrim => {
                if !skip_space(&mut self.buf) {
                    return false;
                }
                self.state = State::Thinking;
            }
            State::Thinking => {
                let Some(i) = self.buf.find(CLOSE) else {
                    emit_certain(&mut self.buf, &[CLOSE], &mut out.thinking);
                    return false;
                };
                out.thinking.push_str(self.buf[..i].trim_end());
                self.buf.drain(..i + CLOSE.len());
                self.state = State::Content;
                self.lead_trim = true;
            }
            State::Content => {
                if self.lead_trim {
                    if !skip_space(&mut self.buf) {
                        return false;
                    }
                    self.lead_trim = false;
                }
                if let Some(i) = self.buf.find(CALL_START) {
                    out.content.push_str(self.buf[..i].trim_end());
                    self.buf.drain(..i + CALL_START.len());
                    self.state = State::Calls;
                    return true;
                }
                // Hold a partial tag and the whitespace before it (trimmed if a call follows);
                // at the end it is content after all.
                let emit = if done {
                    self.buf.len()
                } else {
                    let keep = partial_tag_len(&self.buf, &[CALL_START]);
                    self.buf[..self.buf.len() - keep].trim_end().len()
                };
                out.content.push_str(&self.buf[..emit]);
                self.buf.drain(..emit);
                return false;
            }
            State::Calls => {
                let Some(i) = self.buf.find(CALL_END) else {
                    return false;
                };
                match parse_calls(&self.buf[..i]) {
                    Some(calls) => {
                        for (name, arguments) in calls {
                            out.push_call(&mut self.index, name, arguments);
                        }
                        self.buf.drain(..i + CALL_END.len());
                        // Another call right after is found again by the content state.
                        self.state = State::Content;
                        self.lead_trim = true;
                    }
                    None => self.state = State::Stuck,
                }
            }
            State::Stuck => {
                self.buf.clear();
                return false;
            }
        }
        true
    }
}

impl Parser for Lfm2 {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, false) {}
        if done {
            while self.step(&mut out, true) {}
            // Held thinking and an unclosed call are not delivered.
            self.buf.clear();
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, CLOSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use serde_json::{json, Value as J};

    fn thinking() -> Lfm2 {
        Lfm2::new(true, Some(&Think::Bool(true)), false)
    }

    #[test]
    fn thinking_is_the_models_choice() {
        let cases = [
            (
                " \n<think>\n Let me see. \n</think>\n\n The answer. ",
                "Let me see.",
                "The answer. ",
            ),
            ("<think><think> x</think>y", "x", "y"),
            ("<think> <think>x</think>y", "<think>x", "y"),
            ("Direct answer </think>", "", "Direct answer </think>"),
            ("  <thi", "", "<thi"),
            ("<think>", "", ""),
            ("<think><th", "<th", ""),
            ("<think>open </thi", "open", ""),
            ("   ", "", ""),
        ];
        for (s, want_thinking, want_content) in cases {
            every_split(s, |chunks| {
                let r = run(&mut thinking(), chunks);
                assert_eq!(r.thinking, want_thinking, "{chunks:?}");
                assert_eq!(r.content, want_content, "{chunks:?}");
            });
        }
    }

    #[test]
    fn thinking_needs_the_variant_and_think_on() {
        let s = "<think>x</think>y";
        for (variant, think, prefilled) in [
            (false, Some(Think::Bool(true)), false),
            (true, None, false),
            (true, Some(Think::Bool(false)), false),
            (true, Some(Think::Level("high".into())), true),
        ] {
            let mut p = Lfm2::new(variant, think.as_ref(), prefilled);
            assert!(p.thinking_close().is_empty());
            let r = run(&mut p, &[s]);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("", s));
        }
        assert_eq!(thinking().thinking_close(), ["</think>"]);
    }

    #[test]
    fn tool_calls_under_every_split() {
        let s = "<think>plan</think>Checking. \n<|tool_call_start|>[get_weather(city='Paris'), now()]<|tool_call_end|><|tool_call_start|>add(a=1)<|tool_call_end|>\n Done <|tool_call_st";
        every_split(s, |chunks| {
            let r = run(&mut thinking(), chunks);
            assert_eq!(r.thinking, "plan");
            assert_eq!(r.content, "Checking.Done <|tool_call_st", "{chunks:?}");
            let got: Vec<(String, i64, J)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.clone(), c.index, J::Object(c.arguments.clone())))
                .collect();
            assert_eq!(
                got,
                [
                    ("get_weather".into(), 0, json!({"city": "Paris"})),
                    ("now".into(), 1, json!({})),
                    ("add".into(), 2, json!({"a": 1})),
                ],
                "{chunks:?}"
            );
        });
    }

    #[test]
    fn a_failed_call_ends_the_output_and_an_open_one_is_dropped() {
        for s in [
            "Before.<|tool_call_start|>not a call<|tool_call_end|>After.<|tool_call_start|>f()<|tool_call_end|>",
            "Before.<|tool_call_start|>f(x=1)",
        ] {
            every_split(s, |chunks| {
                let r = run(&mut Lfm2::new(false, None, false), chunks);
                assert_eq!(r.content, "Before.");
                assert!(r.tool_calls.is_empty());
            });
        }
    }

    #[test]
    fn registered_names() {
        use crate::prompt::parsers::{for_model, support, Options, Support};
        use crate::prompt::{Message, Template};
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        assert_eq!(
            support("lfm2"),
            Some(Support {
                tools: true,
                thinking: false
            })
        );
        assert_eq!(
            support("lfm2-thinking"),
            Some(Support {
                tools: true,
                thinking: true
            })
        );
        let on = Think::Bool(true);
        let prefill = Message::new("assistant", "So");
        for (named, think, last, close) in [
            ("lfm2", Some(&on), None, false),
            ("lfm2-thinking", Some(&on), None, true),
            ("lfm2-thinking", None, None, false),
            ("lfm2-thinking", Some(&on), Some(&prefill), false),
        ] {
            let o = Options {
                named,
                think,
                last,
                ..Default::default()
            };
            assert_eq!(
                !for_model(&t, &o).thinking_close().is_empty(),
                close,
                "{named}"
            );
        }
    }
}
