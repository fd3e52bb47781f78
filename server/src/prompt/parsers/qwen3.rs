//! The Qwen 3 output parser (Ollama's `Qwen3Parser`, parser names `qwen3` and `qwen3-thinking`)
//! and the streaming machine it shares with the Qwen 3.5 parser ([`super::qwen35`]: same
//! thinking and content rules, XML calls instead of JSON ones).
//!
//! The machine, in Ollama's terms:
//! - Thinking on: the prompt already opened `<think>`, so the response starts in thinking; one
//!   leading `<think>` the model may repeat anyway is dropped, with the whitespace around it.
//!   Thinking ends at `</think>` or at a `<tool_call>` (whichever comes first; some checkpoints
//!   forget `</think>` before calling). Whitespace before either tag and after `</think>` is cut.
//! - Content: text up to `<tool_call>` (whitespace before the tag is cut); the call's text runs to
//!   `</tool_call>` and whitespace after that is cut too. Calls get `index` in order (per
//!   response) and ids from [`call_id`].
//! - Trailing whitespace is held back until something follows it; at the end of the response it
//!   is dropped, as Ollama drops it.
//! - `qwen3` never thinks (tags are content); `qwen3-thinking` thinks unless `think` is false.
//!   Neither looks at an assistant prefill (Ollama's `Qwen3Parser` ignores it).
//!
//! A `qwen3` call is JSON `{"name": …, "arguments": {…}}` (field names matched case-insensitively
//! as Go's decoder does; the tool need not be one of the request's). Where Ollama's parser fails
//! the whole request (bad JSON, no name), herd keeps the call's text as content, as herd's other
//! tool parsers do ([`super::tools`]): `<tool_call>…</tool_call>` verbatim. What Ollama still
//! holds when the response ends is dropped as Ollama drops it: a call never closed, a partial tag
//! (with the whitespace before it), a lone partial `<think>` at the start.
//!
//! Ollama's parser decides some of these per chunk: whether whitespace after `<think>` or
//! `</tool_call>` that arrives in a later chunk is cut (herd: always, as for one whole chunk), and
//! for Qwen 3.5 whether a `<tool_call>` in the thinking ends it (Go: not when a `</think>` comes
//! later in the same chunk, nor when the chunk ends in a partial tag, which then sends the call's
//! text out as thinking; herd: always, the first of the two tags wins, as Qwen 3's parser does).

use serde_json::Value as J;

use super::qwen3coder_call::{CallFormat, CALL_CLOSE, CALL_OPEN};
use super::{partial_tag_len, skip_space, thinking_close_if, Options, Parsed, Parser};
use crate::prompt::Think;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Thinking, before anything but whitespace: a `<think>` here is dropped.
    Leading,
    /// After a dropped `<think>`: whitespace is cut.
    ThinkingStart,
    Thinking,
    /// After `</think>` or `</tool_call>`: whitespace is cut.
    ContentStart,
    Content,
    /// Inside `<tool_call>`, waiting for `</tool_call>`.
    Call,
}

/// The Qwen 3 / Qwen 3.5 output parser.
pub struct QwenParser {
    format: CallFormat,
    /// The request's tools as sent (the XML format types arguments by them).
    schemas: Vec<J>,
    starts_thinking: bool,
    state: State,
    buf: String,
    index: i64,
}

impl QwenParser {
    /// `qwen3` (`thinking_support` false) or `qwen3-thinking` (true): thinking follows `think`,
    /// on when unset.
    pub fn qwen3(thinking_support: bool, o: &Options) -> QwenParser {
        let on = thinking_support && o.think.is_none_or(Think::enabled);
        QwenParser::new(CallFormat::Json, on, o.schemas)
    }

    pub(crate) fn new(format: CallFormat, thinking: bool, schemas: &[J]) -> QwenParser {
        QwenParser {
            format,
            schemas: schemas.to_vec(),
            starts_thinking: thinking,
            state: if thinking {
                State::Leading
            } else {
                State::Content
            },
            buf: String::new(),
            index: 0,
        }
    }

    fn step(&mut self, out: &mut Parsed, done: bool) {
        match self.state {
            State::Leading => {
                let t = self.buf.trim_start();
                if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                    self.buf = rest.to_string();
                    self.state = State::ThinkingStart;
                } else if done && THINK_OPEN.starts_with(t) {
                    // Still possibly `<think>` at the end: Ollama never delivers it.
                    self.buf.clear();
                } else if done || !THINK_OPEN.starts_with(t) {
                    self.state = State::Thinking;
                }
            }
            State::ThinkingStart => self.skip_space(State::Thinking),
            State::ContentStart => self.skip_space(State::Content),
            State::Thinking => self.text(out, done, true),
            State::Content => self.text(out, done, false),
            State::Call => {
                if let Some(i) = self.buf.find(CALL_CLOSE) {
                    let raw: String = self.buf.drain(..i).collect();
                    self.buf.drain(..CALL_CLOSE.len());
                    self.call(&raw, out);
                    self.state = State::ContentStart;
                } else if done {
                    // Never closed: Ollama never delivers it.
                    self.buf.clear();
                }
            }
        }
    }

    fn skip_space(&mut self, next: State) {
        if skip_space(&mut self.buf) {
            self.state = next;
        }
    }

    /// Thinking or content up to the next tag that ends it; holds back a possible partial tag
    /// and the whitespace before it, and trailing whitespace.
    fn text(&mut self, out: &mut Parsed, done: bool, thinking: bool) {
        let tags: &[&str] = if thinking {
            &[THINK_CLOSE, CALL_OPEN]
        } else {
            &[CALL_OPEN]
        };
        let sink = if thinking {
            &mut out.thinking
        } else {
            &mut out.content
        };
        let first = tags
            .iter()
            .filter_map(|&t| self.buf.find(t).map(|i| (i, t)))
            .min();
        if let Some((i, tag)) = first {
            sink.push_str(self.buf[..i].trim_end());
            self.buf.drain(..i + tag.len());
            self.state = if tag == CALL_OPEN {
                State::Call
            } else {
                State::ContentStart
            };
            return;
        }
        // A possible partial tag is held back, and at the end dropped (as Ollama drops it).
        let keep = partial_tag_len(&self.buf, tags);
        let emit = self.buf[..self.buf.len() - keep].trim_end().len();
        sink.push_str(&self.buf[..emit]);
        if done {
            self.buf.clear();
        } else {
            self.buf.drain(..emit);
        }
    }

    /// One call's text: a call, or (not a call after all) content.
    fn call(&mut self, raw: &str, out: &mut Parsed) {
        (self.format).emit(raw, &self.schemas, &mut self.index, out);
    }
}

impl Parser for QwenParser {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        loop {
            let before = (self.state, self.buf.len());
            self.step(&mut out, done);
            if (self.state, self.buf.len()) == before {
                break;
            }
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
    use crate::prompt::Message;
    use serde_json::json;

    fn parser(named: &str, think: Option<Think>, last: Option<&Message>) -> QwenParser {
        let o = Options {
            think: think.as_ref(),
            last,
            ..Options::default()
        };
        QwenParser::qwen3(named == "qwen3-thinking", &o)
    }

    fn calls(r: &Parsed) -> Vec<(String, i64, J)> {
        let c = r.tool_calls.iter();
        c.map(|c| (c.name.clone(), c.index, J::Object(c.arguments.clone())))
            .collect()
    }

    #[test]
    fn thinking_content_and_json_calls_under_every_split() {
        let s = "<think>\n Let me look.  \n</think>\n\nSure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"opts\": {\"b\": 1, \"a\": 2.0}}}\n</tool_call>\n<tool_call>{\"NAME\":\"add\",\"Arguments\":{\"b\":1,\"a\":2}}</tool_call>\n\nDone.  ";
        every_split(s, |chunks| {
            let r = run(&mut parser("qwen3-thinking", None, None), chunks);
            assert_eq!(r.thinking, "Let me look.", "{chunks:?}");
            assert_eq!(r.content, "Sure.Done.", "{chunks:?}");
            // Top-level arguments keep the model's order; nested objects are Go maps (sorted).
            let want = vec![
                (
                    "get_weather".into(),
                    0,
                    json!({"city": "Paris", "opts": {"a": 2, "b": 1}}),
                ),
                ("add".into(), 1, json!({"b": 1, "a": 2})),
            ];
            assert_eq!(calls(&r), want, "{chunks:?}");
            let keys: Vec<&String> = r.tool_calls[1].arguments.keys().collect();
            assert_eq!(keys, ["b", "a"]);
            assert!(r.tool_calls.iter().all(|c| c.id.starts_with("call_")));
        });
    }

    #[test]
    fn qwen3_never_thinks() {
        let on = Some(Think::Bool(true));
        let s = "<think>x</think>y <tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
        every_split(s, |chunks| {
            let mut p = parser("qwen3", on.clone(), None);
            assert!(p.thinking_close().is_empty());
            let r = run(&mut p, chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                ("", "<think>x</think>y")
            );
            assert_eq!(calls(&r), vec![("f".into(), 0, json!({}))]);
        });
    }

    #[test]
    fn qwen3_thinking_follows_think_not_a_prefill() {
        let prefill = Message::new("assistant", "The answer");
        let cases = [
            (None, None, "x</think>y", ("x", "y")),
            (None, Some(&prefill), "x</think>y", ("x", "y")),
            (
                Some(Think::Level("low".into())),
                None,
                "x</think>y",
                ("x", "y"),
            ),
            (
                Some(Think::Bool(false)),
                None,
                "<think>a</think>b",
                ("", "<think>a</think>b"),
            ),
        ];
        for (think, last, s, (thinking, content)) in cases {
            let on = think.as_ref().is_none_or(Think::enabled);
            let mut p = parser("qwen3-thinking", think, last);
            let close = if on { vec!["</think>"] } else { vec![] };
            assert_eq!(p.thinking_close(), close, "{s}");
            let r = run(&mut p, &[s]);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (thinking, content)
            );
        }
    }

    #[test]
    fn a_call_ends_thinking_and_one_repeated_think_tag_is_dropped() {
        let s =
            "plan <tool_call>{\"name\":\"f\",\"arguments\":{\"x\":1}}</tool_call> </think> after";
        every_split(s, |chunks| {
            let r = run(&mut parser("qwen3-thinking", None, None), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                ("plan", "</think> after")
            );
            assert_eq!(calls(&r), vec![("f".into(), 0, json!({"x": 1}))]);
        });
        every_split("  <think>\n<think>x</think>y", |chunks| {
            let r = run(&mut parser("qwen3-thinking", None, None), chunks);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("<think>x", "y"));
        });
    }

    #[test]
    fn calls_that_fail_are_content() {
        // Ollama fails the request on these; herd keeps the text.
        let s = "a <tool_call>{\"arguments\":{}}</tool_call> b <tool_call>[1]</tool_call>\n<tool_call>{\"name\":\"f\",\"arguments\":\"{}\"}</tool_call>";
        every_split(s, |chunks| {
            let r = run(&mut parser("qwen3", None, None), chunks);
            let want = "a<tool_call>{\"arguments\":{}}</tool_call>b<tool_call>[1]</tool_call><tool_call>{\"name\":\"f\",\"arguments\":\"{}\"}</tool_call>";
            assert_eq!(r.content, want, "{chunks:?}");
            assert!(r.tool_calls.is_empty());
        });
        // Null arguments are none (Go leaves the map empty); the index counts calls only.
        let s =
            "<tool_call>x</tool_call><tool_call>{\"name\":\"f\",\"arguments\":null}</tool_call>";
        let r = run(&mut parser("qwen3", None, None), &[s]);
        assert_eq!(calls(&r), vec![("f".into(), 0, json!({}))]);
    }

    #[test]
    fn the_end_of_the_response() {
        let cases = [
            ("qwen3", "Hi  \n", ("", "Hi")),
            ("qwen3-thinking", "deep  ", ("deep", "")),
            // What could still be a tag, and a call never closed, are dropped as Ollama drops them.
            ("qwen3", "x <tool_", ("", "x")),
            ("qwen3-thinking", "y </thi", ("y", "")),
            ("qwen3-thinking", " <thi", ("", "")),
            ("qwen3-thinking", "<think>", ("", "")),
            ("qwen3", "a <tool_call>{\"name\"  ", ("", "a")),
            (
                "qwen3-thinking",
                "plan <tool_call>{\"name\":\"f\"",
                ("plan", ""),
            ),
        ];
        for (named, s, (thinking, content)) in cases {
            every_split(s, |chunks| {
                let r = run(&mut parser(named, None, None), chunks);
                assert_eq!(
                    (r.thinking.as_str(), r.content.as_str()),
                    (thinking, content)
                );
            });
        }
    }

    #[test]
    fn held_back_text_is_released_once_it_is_no_tag() {
        let mut p = parser("qwen3", None, None);
        assert_eq!(p.add("a <tool_", false).content, "a");
        assert_eq!(p.add("box", false).content, " <tool_box");
        assert_eq!(p.add("  ", false).content, "");
        assert_eq!(p.add("c", true).content, "  c");
    }
}
