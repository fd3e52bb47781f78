//! Gemma 4 output, Ollama's `Gemma4Parser`, for the parser names `gemma4` (thinking supported)
//! and `gemma4-no-thinking`:
//! - `<|channel>` opens thinking (a leading `thought\n` channel name is dropped) until
//!   `<channel|>`; whitespace before either tag and after the closing one is dropped. With
//!   thinking off (or unsupported) such blocks are removed from the output;
//! - `<|tool_call>call:NAME{…}<tool_call|>` is a call ([`super::gemma4_args`]); stray
//!   `<tool_call|>` / `<|tool_response>` tags and whitespace right after a call are dropped;
//!   a call still open at the end of the output is parsed as it stands;
//! - with thinking on, a response after tool results starts inside the thinking (the renderer
//!   pre-opened `<|channel>thought\n`).
//!
//! A call body that does not parse (even after Ollama's repairs) is dropped, as Ollama does (it
//! logs it and returns no error); unlike `tools.rs` its text is not delivered as content, since
//! the Go parser never returns it.
//!
//! Streaming: Ollama decides per chunk in two places that depend on where chunks end; herd
//! decides as if the whole output were one chunk, so that every chunking gives the same result:
//! whitespace that ends the content so far is held back (dropped if a tag follows), whitespace
//! after `<channel|>` is dropped even when it arrives later, and the earliest of `<|channel>` /
//! `<|tool_call>` wins (Ollama, given both in one chunk, looks for `<|channel>` first).

use serde_json::Value as J;

use super::gemma4_args::parse_call;
use super::{partial_tag_len, skip_space, Options, Parsed, Parser};

const THINK_OPEN: &str = "<|channel>";
const THINK_CLOSE: &str = "<channel|>";
const CALL_OPEN: &str = "<|tool_call>";
const CALL_CLOSE: &str = "<tool_call|>";
const RESPONSE: &str = "<|tool_response>";
const CHANNEL_NAME: &str = "thought\n";

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Content,
    Thinking,
    ToolCall,
    /// Right after a call: whitespace and stray closing/response tags are dropped.
    AfterCall,
}

pub struct Gemma4 {
    state: State,
    buf: String,
    /// Thinking is delivered (supported and requested); otherwise it is dropped.
    thinking: bool,
    /// Just entered thinking: a `thought\n` channel name may follow.
    channel_name: bool,
    /// Just left thinking: whitespace is dropped until content starts.
    after_thinking: bool,
    tools: Vec<J>,
    index: i64,
    close: Vec<String>,
}

impl Gemma4 {
    /// The parser for one response; `supports_thinking` is false for `gemma4-no-thinking`.
    pub fn new(o: &Options, supports_thinking: bool) -> Gemma4 {
        // The server has already defaulted an unset `think` to on for a thinking model.
        let thinking = supports_thinking && o.thinking_on();
        let after_tool = o.last.is_some_and(|m| m.role == "tool");
        let prefilled = o
            .last
            .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
        let state = if thinking && after_tool {
            State::Thinking
        } else {
            State::Content
        };
        Gemma4 {
            state,
            buf: String::new(),
            thinking,
            channel_name: false,
            after_thinking: false,
            tools: o.schemas.to_vec(),
            index: 0,
            close: match thinking && (after_tool || !prefilled) {
                true => vec![THINK_CLOSE.to_string()],
                false => Vec::new(),
            },
        }
    }

    /// One step; true when it changed state and should run again.
    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.buf.is_empty() {
            return false;
        }
        match self.state {
            State::Content => self.content(out, done),
            State::Thinking => self.thinking(out, done),
            State::ToolCall => self.tool_call(out, done),
            State::AfterCall => self.after_call(done),
        }
    }

    fn content(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.after_thinking {
            self.drop_leading_space();
            if self.buf.is_empty() {
                return false;
            }
            self.after_thinking = false;
        }
        let think = self
            .buf
            .find(THINK_OPEN)
            .map(|i| (i, THINK_OPEN, State::Thinking));
        let call = self
            .buf
            .find(CALL_OPEN)
            .map(|i| (i, CALL_OPEN, State::ToolCall));
        let first = match (think, call) {
            (Some(t), Some(c)) => Some(if c.0 < t.0 { c } else { t }),
            (t, c) => t.or(c),
        };
        if let Some((i, tag, next)) = first {
            out.content.push_str(self.buf[..i].trim_end());
            self.buf.drain(..i + tag.len());
            self.state = next;
            self.channel_name = next == State::Thinking;
            return true;
        }
        let keep = if done {
            0
        } else {
            // A possible partial tag, and the whitespace before it (trimmed if a tag follows).
            let partial = partial_tag_len(&self.buf, &[THINK_OPEN, CALL_OPEN]);
            self.buf.len() - self.buf[..self.buf.len() - partial].trim_end().len()
        };
        let emit = self.buf.len() - keep;
        out.content.push_str(&self.buf[..emit]);
        self.buf.drain(..emit);
        false
    }

    fn thinking(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.channel_name {
            if self.buf.starts_with(CHANNEL_NAME) {
                self.buf.drain(..CHANNEL_NAME.len());
                self.channel_name = false;
            } else if !done && CHANNEL_NAME.starts_with(self.buf.as_str()) {
                return false;
            } else {
                self.channel_name = false;
            }
        }
        let mut thought = String::new();
        let next = if let Some(i) = self.buf.find(THINK_CLOSE) {
            thought.push_str(self.buf[..i].trim_end());
            self.buf.drain(..i + THINK_CLOSE.len());
            self.state = State::Content;
            self.after_thinking = true;
            true
        } else {
            let keep = if done {
                0
            } else {
                let partial = partial_tag_len(&self.buf, &[THINK_CLOSE]);
                self.buf.len() - self.buf[..self.buf.len() - partial].trim_end().len()
            };
            thought.extend(self.buf.drain(..self.buf.len() - keep));
            false
        };
        if self.thinking {
            out.thinking.push_str(&thought);
        }
        next
    }

    fn tool_call(&mut self, out: &mut Parsed, done: bool) -> bool {
        let (body_end, rest) = match self.buf.find(CALL_CLOSE) {
            Some(i) => (i, i + CALL_CLOSE.len()),
            None if done => (self.buf.len(), self.buf.len()),
            None => return false,
        };
        if let Some((name, arguments)) = parse_call(&self.buf[..body_end], &self.tools) {
            out.push_call(&mut self.index, name, arguments);
        }
        self.buf.drain(..rest);
        self.state = if rest == body_end {
            State::Content
        } else {
            State::AfterCall
        };
        true
    }

    fn after_call(&mut self, done: bool) -> bool {
        loop {
            self.drop_leading_space();
            let Some(tag) = [CALL_CLOSE, RESPONSE]
                .into_iter()
                .find(|t| self.buf.starts_with(t))
            else {
                break;
            };
            self.buf.drain(..tag.len());
        }
        if self.buf.is_empty() {
            return false;
        }
        if CALL_CLOSE.starts_with(self.buf.as_str()) || RESPONSE.starts_with(self.buf.as_str()) {
            // Still possibly a stray tag; at the end it is dropped.
            if done {
                self.buf.clear();
                self.state = State::Content;
            }
            return false;
        }
        self.state = State::Content;
        true
    }

    fn drop_leading_space(&mut self) {
        skip_space(&mut self.buf);
    }
}

impl Parser for Gemma4 {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, done) {}
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        self.close.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil;
    use crate::prompt::{Message, Think};
    use serde_json::json;

    struct Want {
        content: &'static str,
        thinking: &'static str,
        calls: Vec<(&'static str, J)>,
    }

    fn want(content: &'static str, thinking: &'static str, calls: Vec<(&'static str, J)>) -> Want {
        Want {
            content,
            thinking,
            calls,
        }
    }

    /// Every chunking of `output` gives `w`, with indexes in order and fresh ids.
    fn check(o: &Options, supports: bool, output: &str, w: &Want) {
        let output = output.replace('`', "<|\"|>");
        let want = (w.content, w.thinking, w.calls.as_slice());
        testutil::check(|| Gemma4::new(o, supports), &output, want);
    }

    fn opts<'a>(
        think: Option<&'a Think>,
        last: Option<&'a Message>,
        schemas: &'a [J],
    ) -> Options<'a> {
        Options {
            think,
            last,
            schemas,
            named: "gemma4",
            ..Default::default()
        }
    }

    #[test]
    fn thinking_content_and_calls_under_every_split() {
        let on = Think::Bool(true);
        let o = opts(Some(&on), None, &[]);
        let cases = [
            (
                "<|channel>thought\nLet me think...  \n<channel|>\n\n The answer is 42.",
                want("The answer is 42.", "Let me think...", vec![]),
            ),
            (
                "<|channel>thinking here<channel|>content",
                want("content", "thinking here", vec![]),
            ),
            (
                "<|channel>thought\n\nA<channel|>x <|channel>B\n<channel|> y",
                want("xy", "\nAB", vec![]),
            ),
            (
                "<|channel>thought\nplan<channel|>I'll check. \n<|tool_call>call:get_weather{location:`Paris`}<tool_call|>",
                want("I'll check.", "plan", vec![("get_weather", json!({"location": "Paris"}))]),
            ),
            (
                "<|tool_call>call:a{n:1}<tool_call|> <tool_call|>\n<|tool_response><|tool_call>call:b{s:`x, y:{z}`}<tool_call|><tool_call|>Done. ",
                want("Done. ", "", vec![("a", json!({"n": 1})), ("b", json!({"s": "x, y:{z}"}))]),
            ),
            (
                "<|tool_call>call:bad{x:<tool_call|>after <|tool_call>call:ok{}",
                want("after", "", vec![("ok", json!({}))]),
            ),
            (
                "<|tool_call>call:f{a:1}<tool_call|><tool_",
                want("", "", vec![("f", json!({"a": 1}))]),
            ),
            (
                "<|tool_call>call:f{a:1}<tool_call|><tools> are fine",
                want("<tools> are fine", "", vec![("f", json!({"a": 1}))]),
            ),
            (
                "Hello <|chan and < and <|tool",
                want("Hello <|chan and < and <|tool", "", vec![]),
            ),
            (
                "<|channel>thoughtful start, never closed  ",
                want("", "thoughtful start, never closed  ", vec![]),
            ),
            (
                "<|channel>thought",
                want("", "thought", vec![]),
            ),
            (
                "  ünïcödé\u{3000} <|tool_call>call:f{t:`ü`}<tool_call|>",
                want("  ünïcödé", "", vec![("f", json!({"t": "ü"}))]),
            ),
        ];
        for (output, w) in &cases {
            check(&o, true, output, w);
        }
    }

    #[test]
    fn thinking_off_or_unsupported_drops_channel_blocks() {
        let off = Think::Bool(false);
        let on = Think::Bool(true);
        let output = "<|channel>thought\nhidden<channel|>Shown <|tool_call>call:f{}<tool_call|>";
        let w = want("Shown", "", vec![("f", json!({}))]);
        check(&opts(Some(&off), None, &[]), true, output, &w);
        check(&opts(Some(&on), None, &[]), false, output, &w);
        assert!(Gemma4::new(&opts(Some(&off), None, &[]), true)
            .thinking_close()
            .is_empty());
        assert!(Gemma4::new(&opts(Some(&on), None, &[]), false)
            .thinking_close()
            .is_empty());
        // The server defaults an unset think to on for a thinking model.
        check(
            &opts(None, None, &[]),
            true,
            output,
            &want("Shown", "hidden", vec![("f", json!({}))]),
        );
    }

    #[test]
    fn after_tool_results_the_response_starts_in_thinking() {
        let on = Think::Bool(true);
        let result = Message::new("tool", "go.mod\n");
        let o = opts(Some(&on), Some(&result), &[]);
        // No channel name to strip here: it was in the prompt.
        check(
            &o,
            true,
            "thought\nThe user asked.<channel|> go.mod",
            &want("go.mod", "thought\nThe user asked.", vec![]),
        );
        assert_eq!(Gemma4::new(&o, true).thinking_close(), [THINK_CLOSE]);
        // Thinking off: plain content.
        let off = Think::Bool(false);
        let o = opts(Some(&off), Some(&result), &[]);
        check(&o, true, "a<channel|>b", &want("a<channel|>b", "", vec![]));
    }

    #[test]
    fn thinking_close_follows_ollamas_init() {
        let on = Think::Bool(true);
        let prefill = Message::new("assistant", "The answer");
        let empty = Message::new("assistant", "");
        let user = Message::new("user", "q");
        for (last, want) in [
            (None, true),
            (Some(&user), true),
            (Some(&empty), true),
            (Some(&prefill), false),
        ] {
            let p = Gemma4::new(&opts(Some(&on), last, &[]), true);
            assert_eq!(!p.thinking_close().is_empty(), want, "{last:?}");
        }
        // A prefill still starts in content, where a channel opens thinking.
        let o = opts(Some(&on), Some(&prefill), &[]);
        check(
            &o,
            true,
            " is<|channel>x<channel|>4",
            &want(" is4", "x", vec![]),
        );
    }

    #[test]
    fn schemas_repair_raw_string_arguments() {
        let tools = [
            json!({"type": "function", "function": {"name": "write", "parameters": {
            "type": "object", "properties": {"content": {"type": "string"}}}}}),
        ];
        let o = opts(None, None, &tools);
        check(
            &o,
            false,
            "<|tool_call>call:write{content:# Title\nbody<tool_call|>",
            &want("", "", vec![("write", json!({"content": "# Title\nbody"}))]),
        );
        // Without the schema the call does not parse and is dropped.
        check(
            &opts(None, None, &[]),
            false,
            "<|tool_call>call:write{content:# Title<tool_call|>ok",
            &want("ok", "", vec![]),
        );
    }

    #[test]
    fn partial_tags_and_whitespace_are_held_back() {
        let on = Think::Bool(true);
        let mut p = Gemma4::new(&opts(Some(&on), None, &[]), true);
        assert_eq!(p.add("Hi \n", false).content, "Hi");
        assert_eq!(p.add("there <|chan", false).content, " \nthere");
        let r = p.add("nel>thought\nx  ", false);
        assert_eq!((r.content.as_str(), r.thinking.as_str()), ("", "x"));
        let r = p.add("y<chan", false);
        assert_eq!(r.thinking, "  y");
        let r = p.add("nel|>  ", false);
        assert!(r.is_empty());
        assert_eq!(p.add(" z ", true).content, "z ");
    }
}
