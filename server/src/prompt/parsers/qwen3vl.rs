//! The `qwen3-vl-instruct` and `qwen3-vl-thinking` parsers (Ollama's `Qwen3VLParser`): optional
//! thinking ended by `</think>`, then content with `<tool_call>{"name": …, "arguments": {…}}
//! </tool_call>` JSON calls.
//!
//! Rules, as Ollama's parser gives them for the whole output at once:
//! - `qwen3-vl-thinking` starts in thinking (the prompt opened `<think>`), whatever `think` says,
//!   unless the last message is an assistant prefill with content; `-instruct` starts in content;
//! - thinking ends at `</think>` (whitespace around it dropped), or at a `<tool_call>` that comes
//!   first; a `<think>` tag is not special;
//! - trailing whitespace and a possible partial tag wait for more text; whitespace right before
//!   `<tool_call>` and right after `</tool_call>` is dropped;
//! - a call's JSON is Go's decoding into `api.ToolCallFunction`: field names in any case, `name` a
//!   string, `arguments` an object (top-level keys in the model's order, nested maps sorted as Go
//!   prints them), an integer `index` ignored, other fields ignored, `null` an empty call; tool
//!   names are not checked. Calls get `index` 0, 1, … and an id;
//! - Ollama never flushes at the end: held whitespace or partial tags and an unclosed call are
//!   dropped, and herd drops them too;
//! - a call Ollama cannot decode fails Ollama's whole request; herd, as its other parsers do with
//!   unparseable calls, returns that call's text (with its tags) as content instead.
//!
//! `thinking_close` is `</think>` when the response starts in thinking, except with `think: false`,
//! where Ollama applies a `format` from the first token (its `forceImmediate`).
//!
//! After the thinking, content and calls stream as in the `qwen3-coder` parser ([`Qwen3Coder`],
//! Ollama's code is the same), with calls read as [`CallFormat::Function`].

use super::qwen3coder::Qwen3Coder;
use super::qwen3coder_call::{CallFormat, CALL_OPEN as OPEN};
use super::{emit_certain, thinking_close_if, Options, Parsed, Parser};
use crate::prompt::Think;

const THINK_CLOSE: &str = "</think>";

pub struct Qwen3Vl {
    /// In the thinking the response starts with.
    thinking: bool,
    /// Thinking not delivered yet (a possible partial tag, trailing whitespace).
    buf: String,
    /// After the thinking: content and calls, streamed as Ollama's Qwen3-Coder parser does.
    content: Qwen3Coder,
    close: Vec<String>,
}

impl Qwen3Vl {
    /// `thinking`: the `-thinking` variant (Ollama's `HasThinkingSupport`).
    pub fn new(thinking: bool, o: &Options) -> Qwen3Vl {
        let prefilled = o
            .last
            .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
        let thinking = thinking && !prefilled;
        let immediate = o.think.is_some_and(|t| !Think::enabled(t));
        let close = thinking_close_if(thinking && !immediate, THINK_CLOSE);
        Qwen3Vl {
            thinking,
            buf: String::new(),
            content: Qwen3Coder::with_format(CallFormat::Function, &[]),
            close,
        }
    }
}

impl Parser for Qwen3Vl {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        if !self.thinking {
            return self.content.add(chunk, done);
        }
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        let close = self.buf.find(THINK_CLOSE);
        let (end, rest) = match (self.buf.find(OPEN), close) {
            // A call before any `</think>` ends the thinking and is the content's.
            (Some(o), c) if c.is_none_or(|c| o < c) => (o, o),
            (_, Some(c)) => {
                self.content.skip_space();
                (c, c + THINK_CLOSE.len())
            }
            _ => {
                emit_certain(&mut self.buf, &[THINK_CLOSE, OPEN], &mut out.thinking);
                return out;
            }
        };
        out.thinking.push_str(self.buf[..end].trim_end());
        let rest = self.buf.split_off(rest);
        self.buf.clear();
        self.thinking = false;
        out.extend(self.content.add(&rest, done));
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        self.close.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::same_for_every_split;
    use crate::prompt::Message;
    use serde_json::{json, Value as J};

    fn parse(thinking: bool, o: &Options, s: &str) -> Parsed {
        same_for_every_split(|| Qwen3Vl::new(thinking, o), s)
    }

    fn split(thinking: bool, s: &str) -> (String, String) {
        let r = parse(thinking, &Options::default(), s);
        (r.thinking, r.content)
    }

    #[test]
    fn thinking_ends_at_its_tag_or_a_tool_call() {
        let cases = [
            ("abc</think>", "abc", ""),
            ("  plan \n</think>\n\n Answer. \n", "  plan", "Answer."),
            ("<think>abc</think>def", "<think>abc", "def"),
            ("a<think>b</think></think>", "a<think>b", "</think>"),
            ("a</think", "a", ""),
            ("a</thinking> b", "a</thinking> b", ""),
            (
                "Hello I am think</think>     NOT",
                "Hello I am think",
                "NOT",
            ),
            ("no close at all\n", "no close at all", ""),
        ];
        for (s, thinking, content) in cases {
            assert_eq!(split(true, s), (thinking.into(), content.into()), "{s:?}");
        }
        let r = parse(
            true,
            &Options::default(),
            "think <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> </think>",
        );
        assert_eq!(
            (r.thinking.as_str(), r.content.as_str()),
            ("think", "</think>")
        );
        assert_eq!(r.tool_calls.len(), 1);
    }

    #[test]
    fn instruct_and_prefill_start_in_content() {
        assert_eq!(
            split(false, "abc</think> x"),
            ("".into(), "abc</think> x".into())
        );
        let prefill = Message::new("assistant", "Once");
        let o = Options {
            last: Some(&prefill),
            ..Default::default()
        };
        let r = parse(true, &o, " upon</think>");
        assert_eq!(
            (r.thinking.as_str(), r.content.as_str()),
            ("", " upon</think>")
        );
        assert!(Qwen3Vl::new(true, &o).thinking_close().is_empty());
        // An empty prefill still starts in thinking.
        let empty = Message::new("assistant", "");
        let o = Options {
            last: Some(&empty),
            ..Default::default()
        };
        assert_eq!(parse(true, &o, "x</think>y").thinking, "x");
        assert_eq!(Qwen3Vl::new(true, &o).thinking_close(), [THINK_CLOSE]);
    }

    #[test]
    fn think_false_still_parses_thinking_but_closes_nothing() {
        let off = Think::Bool(false);
        let o = Options {
            think: Some(&off),
            ..Default::default()
        };
        assert!(Qwen3Vl::new(true, &o).thinking_close().is_empty());
        assert_eq!(parse(true, &o, "a</think>b").thinking, "a");
        let on = Think::Level("high".into());
        let o = Options {
            think: Some(&on),
            ..Default::default()
        };
        assert_eq!(Qwen3Vl::new(true, &o).thinking_close(), [THINK_CLOSE]);
        assert!(Qwen3Vl::new(false, &o).thinking_close().is_empty());
    }

    #[test]
    fn json_calls_decode_as_go_does() {
        let s = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"opts\": {\"z\": 1.0, \"a\": 2}}}\n</tool_call>\n<tool_call>{\"Name\": \"b\", \"ARGUMENTS\": null, \"index\": 7, \"extra\": 1}</tool_call>\n<tool_call>null</tool_call>\n tail \n";
        let r = parse(false, &Options::default(), s);
        assert_eq!(r.content, "Sure.tail");
        let calls: Vec<(i64, &str, J)> = r
            .tool_calls
            .iter()
            .map(|c| (c.index, c.name.as_str(), J::Object(c.arguments.clone())))
            .collect();
        assert_eq!(
            calls,
            [
                (
                    0,
                    "get_weather",
                    json!({"city": "Paris", "opts": {"a": 2, "z": 1}})
                ),
                (1, "b", json!({})),
                (2, "", json!({})),
            ]
        );
        let opts: Vec<&String> = r.tool_calls[0].arguments["opts"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(opts, ["a", "z"], "nested maps print sorted");
        assert!(r.tool_calls.iter().all(|c| c.id.starts_with("call_")));
    }

    #[test]
    fn undecodable_calls_are_content_and_unclosed_ones_dropped() {
        for bad in [
            "",
            "[1]",
            "{\"name\": 1}",
            "{\"name\": \"f\", \"arguments\": \"{}\"}",
            "{\"name\": \"f\", \"index\": 1.5}",
            "{\"name\": \"f\"} x",
        ] {
            let s = format!("a <tool_call>{bad}</tool_call> b");
            let r = parse(false, &Options::default(), &s);
            assert!(r.tool_calls.is_empty(), "{bad:?}");
            assert_eq!(
                r.content,
                format!("a<tool_call>{bad}</tool_call>b"),
                "{bad:?}"
            );
        }
        let r = parse(false, &Options::default(), "a <tool_call>{\"name\": \"f\"}");
        assert_eq!((r.content.as_str(), r.tool_calls.len()), ("a", 0));
        let r = parse(true, &Options::default(), "t <tool_call>{\"name\": \"f\"}");
        assert_eq!((r.thinking.as_str(), r.tool_calls.len()), ("t", 0));
    }

    #[test]
    fn registered_as_named_parsers() {
        use crate::prompt::parsers::{for_model, support, Support};
        use crate::prompt::Template;
        assert_eq!(
            support("qwen3-vl-instruct"),
            Some(Support {
                tools: true,
                thinking: false
            })
        );
        assert_eq!(
            support("qwen3-vl-thinking"),
            Some(Support {
                tools: true,
                thinking: true
            })
        );
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        for (name, want) in [
            ("qwen3-vl-instruct", ("", "a</think>b")),
            ("qwen3-vl-thinking", ("a", "b")),
        ] {
            let o = Options {
                named: name,
                ..Default::default()
            };
            let mut p = for_model(&t, &o);
            let r = p.add("a</think>b", true);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), want, "{name}");
        }
    }
}
