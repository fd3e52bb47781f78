//! Nemotron 3 output (Ollama's `Nemotron3NanoParser`), serving the parser names
//! `nemotron-3-nano` and `nemotron-3.5-nano` (one parser; tools and thinking).
//!
//! With thinking on (the request's `think`, unset = on) and no prefill with content, the
//! response begins in thinking (the prompt opened `<think>\n`): a leading `<think>` the model
//! repeats is dropped with the whitespace around it; thinking ends at `</think>` (whitespace
//! after it dropped) or at a `<tool_call>` the model writes without closing its thinking.
//! Thinking loses its trailing whitespace; when the response ends inside it, a held partial tag
//! is dropped, as in Ollama. Everything after is content with tool calls, parsed by Ollama's
//! `qwen3-coder` parser ([`Qwen3Coder`]: calls in the Qwen3-Coder XML format typed by the tool's
//! schema), which also runs alone when thinking is off.

use serde_json::Value as J;

use super::qwen3coder::Qwen3Coder;
use super::{emit_certain, skip_space, thinking_close_if, Parsed, Parser};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const TOOL_OPEN: &str = "<tool_call>";

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Waiting to see whether the model repeats `<think>` (leading whitespace held).
    Opening,
    /// After a repeated `<think>`: whitespace dropped.
    ThinkingStart,
    Thinking,
    /// After `</think>` with nothing yet: whitespace dropped.
    AfterThinking,
    Content,
}

pub struct Nemotron3Nano {
    state: State,
    buf: String,
    calls: Qwen3Coder,
    starts_thinking: bool,
}

impl Nemotron3Nano {
    /// `thinking`: the request's `think` is on or unset; `prefill`: the response continues an
    /// assistant message that has content.
    pub fn new(thinking: bool, prefill: bool, schemas: &[J]) -> Nemotron3Nano {
        let starts_thinking = thinking && !prefill;
        Nemotron3Nano {
            state: if starts_thinking {
                State::Opening
            } else {
                State::Content
            },
            buf: String::new(),
            calls: Qwen3Coder::new(schemas),
            starts_thinking,
        }
    }

    fn step(&mut self, out: &mut Parsed) -> bool {
        match self.state {
            State::Opening => {
                let t = self.buf.trim_start();
                if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                    self.buf = rest.to_string();
                    self.state = State::ThinkingStart;
                } else if t.is_empty() || THINK_OPEN.starts_with(t) {
                    return false;
                } else {
                    // No repeated tag: the thinking keeps its leading whitespace.
                    self.state = State::Thinking;
                }
            }
            State::ThinkingStart | State::AfterThinking => {
                if !skip_space(&mut self.buf) {
                    return false;
                }
                self.state = match self.state {
                    State::ThinkingStart => State::Thinking,
                    _ => State::Content,
                };
            }
            State::Thinking => {
                let close = self.buf.find(THINK_CLOSE);
                let call = self.buf.find(TOOL_OPEN);
                match (close, call) {
                    (Some(i), c) if c.is_none_or(|c| i < c) => {
                        out.thinking.push_str(self.buf[..i].trim_end());
                        self.buf.drain(..i + THINK_CLOSE.len());
                        self.state = State::AfterThinking;
                    }
                    (_, Some(i)) => {
                        out.thinking.push_str(self.buf[..i].trim_end());
                        self.buf.drain(..i);
                        self.state = State::Content;
                    }
                    _ => {
                        emit_certain(&mut self.buf, &[THINK_CLOSE, TOOL_OPEN], &mut out.thinking);
                        return false;
                    }
                }
            }
            State::Content => {
                let text = std::mem::take(&mut self.buf);
                out.extend(self.calls.add(&text, false));
                return false;
            }
        }
        true
    }
}

impl Parser for Nemotron3Nano {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out) {}
        if done {
            // Held thinking (whitespace, a partial tag) and held content are not delivered.
            self.buf.clear();
            out.extend(self.calls.add("", true));
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, THINK_CLOSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use serde_json::json;

    fn p(thinking: bool) -> Nemotron3Nano {
        Nemotron3Nano::new(thinking, false, &[])
    }

    #[test]
    fn thinking_then_content_under_every_split() {
        let cases = [
            (
                "Let me think...</think>\nHere is my answer.",
                "Let me think...",
                "Here is my answer.",
            ),
            (
                " \n<think>\n Think first \n</think>   \n\t Done. ",
                "Think first",
                "Done.",
            ),
            ("<think><think>x</think>y", "<think>x", "y"),
            ("</think>\nJust content.", "", "Just content."),
            ("  leading kept</think>c", "  leading kept", "c"),
            (
                "<thoughts are literal</think>Done.",
                "<thoughts are literal",
                "Done.",
            ),
            (
                "a <tool_call fakeout </think fakeout</think>Done.",
                "a <tool_call fakeout </think fakeout",
                "Done.",
            ),
            ("unfinished thinking </thi", "unfinished thinking", ""),
            ("   ", "", ""),
            ("<thi", "", ""),
        ];
        for (s, thinking, content) in cases {
            every_split(s, |chunks| {
                let r = run(&mut p(true), chunks);
                assert_eq!(r.thinking, thinking, "{chunks:?}");
                assert_eq!(r.content, content, "{chunks:?}");
                assert!(r.tool_calls.is_empty());
            });
        }
    }

    #[test]
    fn tool_calls_end_thinking_with_or_without_close() {
        let call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";
        for (s, thinking, content) in [
            (
                format!("I should check.</think>\nLet me look. \n{call}\n\n"),
                "I should check.",
                "Let me look.",
            ),
            (format!("Analyzing... \n{call}"), "Analyzing...", ""),
        ] {
            every_split(&s, |chunks| {
                let r = run(&mut p(true), chunks);
                assert_eq!(r.thinking, thinking, "{chunks:?}");
                assert_eq!(r.content, content, "{chunks:?}");
                assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
                assert_eq!(r.tool_calls[0].name, "get_weather");
                assert_eq!(
                    J::Object(r.tool_calls[0].arguments.clone()),
                    json!({"city": "Paris"})
                );
            });
        }
    }

    #[test]
    fn thinking_off_or_prefill_is_content() {
        every_split("</think>\nSome content after a spurious tag.", |chunks| {
            let r = run(&mut p(false), chunks);
            assert_eq!(r.content, "</think>\nSome content after a spurious tag.");
            assert_eq!(r.thinking, "");
        });
        let mut prefilled = Nemotron3Nano::new(true, true, &[]);
        assert!(prefilled.thinking_close().is_empty());
        assert_eq!(
            run(&mut prefilled, &["more</think>x"]).content,
            "more</think>x"
        );
        assert!(p(false).thinking_close().is_empty());
        assert_eq!(p(true).thinking_close(), ["</think>"]);
    }

    /// Thinking off: the content side alone (Ollama's Qwen3-Coder parser).
    fn content(chunks: &[&str]) -> Parsed {
        run(&mut p(false), chunks)
    }

    fn call(name: &str, params: &[(&str, &str)]) -> String {
        let mut s = format!("<tool_call>\n<function={name}>\n");
        for (k, v) in params {
            s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
        }
        s + "</function>\n</tool_call>"
    }

    #[test]
    fn content_and_calls_under_every_split() {
        let s = format!(
            "I'll check. \n{}\n\n  Then more.  {}  tail \n",
            call("search", &[("query", "test query"), ("n", "2")]),
            call("now", &[])
        );
        every_split(&s, |chunks| {
            let r = content(chunks);
            assert_eq!(r.content, "I'll check.Then more.tail", "{chunks:?}");
            let got: Vec<(&str, i64, J)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.index, J::Object(c.arguments.clone())))
                .collect();
            assert_eq!(
                got,
                [
                    ("search", 0, json!({"query": "test query", "n": "2"})),
                    ("now", 1, json!({}))
                ],
                "{chunks:?}"
            );
            assert!(r.tool_calls.iter().all(|c| c.id.starts_with("call_")));
        });
    }

    #[test]
    fn held_content_at_the_end_is_not_delivered() {
        for (s, want) in [
            ("answer <tool_ca", "answer"),
            ("answer\n\n", "answer"),
            ("answer <tool_call>\n<function=f>\n", "answer"),
            ("<tool_cal> x", "<tool_cal> x"),
        ] {
            every_split(s, |chunks| {
                let r = content(chunks);
                assert_eq!(r.content, want, "{chunks:?}");
                assert!(r.tool_calls.is_empty());
            });
        }
    }

    #[test]
    fn undecodable_calls_stay_content() {
        for raw in [
            "\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
            "\n<parameter=a>\n1\n</parameter>\n",
            "\n<function=f>\n<parameter=a>\n1\n</function>\n",
            "\n<function=f>\n<parameter=a>\nbell\u{7}\n</parameter>\n</function>\n",
            "</parameter><function=f></function>",
            "<function name=\"a&b\"></function>",
            "<function=f></function name=\"x\">",
        ] {
            let s = format!("x<tool_call>{raw}</tool_call>y");
            let r = content(&[&s]);
            assert!(r.tool_calls.is_empty(), "{raw:?}");
            assert_eq!(r.content, s, "{raw:?}");
        }
    }

    #[test]
    fn registered_under_both_names() {
        use crate::prompt::parsers::{for_model, support, Options, Support};
        use crate::prompt::{Message, Template, Think};
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        let off = Think::Bool(false);
        let prefill = Message::new("assistant", "So");
        let empty_prefill = Message::new("assistant", "");
        for name in ["nemotron-3-nano", "nemotron-3.5-nano"] {
            assert_eq!(
                support(name),
                Some(Support {
                    tools: true,
                    thinking: true
                })
            );
            let o = |think, last| Options {
                named: name,
                think,
                last,
                ..Default::default()
            };
            let mut p = for_model(&t, &o(None, None));
            assert_eq!(p.thinking_close(), ["</think>"]);
            let r = run(
                p.as_mut(),
                &["a</think>b<tool_call>\n<function=f>\n</function>\n</tool_call>"],
            );
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str(), r.tool_calls.len()),
                ("a", "b", 1)
            );
            assert!(for_model(&t, &o(Some(&off), None))
                .thinking_close()
                .is_empty());
            assert!(for_model(&t, &o(None, Some(&prefill)))
                .thinking_close()
                .is_empty());
            assert_eq!(
                for_model(&t, &o(None, Some(&empty_prefill))).thinking_close(),
                ["</think>"]
            );
        }
    }
}
