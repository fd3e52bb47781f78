//! DeepSeek-token output (Ollama's `DeepSeek3Parser`, the `PARSER` name `deepseek3`), and the
//! streaming machine it shares with `cogito` ([`super::cogito`], Ollama's `CogitoParser`, which
//! is the same parser with its own call body and tool-output handling):
//! - thinking (when the response starts in it) runs to `</think>`; whitespace before the tag and
//!   after it is dropped;
//! - content runs until `<｜tool▁calls▁begin｜>` (whitespace before it dropped) or a tool-output
//!   region the model writes itself (deepseek3: `<｜tool▁output▁begin｜>…<｜tool▁output▁end｜>`,
//!   whose text stays content; cogito: `<｜tool▁outputs▁begin｜>…<｜tool▁outputs▁end｜>`, dropped);
//! - in a calls block each `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>` is one call, until
//!   `<｜tool▁calls▁end｜>`; text between calls is dropped.
//!
//! Where Ollama's Go parser is silent, herd matches its one-shot result (`Add(all, true)`):
//! whitespace held back for a tag that never comes is delivered in content; text still held in
//! thinking, an unfinished calls block or an unfinished tool-output region at the end is dropped,
//! as Go never delivers it. A call whose body does not parse is dropped with the rest of its block
//! (Go logs it and skips to `<｜tool▁calls▁end｜>`; it returns no error, so neither does herd).
//! Go scans a whole buffer for one tag before another; herd takes tags in the order they appear,
//! which is what Go does on a token-by-token stream. Tool names are not checked against the
//! request (Go does not check them).
//!
//! Init: deepseek3 thinks only when the request asks (`think` true or a level; unset is off) and
//! no non-empty assistant prefill is being continued (nor herd's two-pass thinking prefill, see
//! [`after_thinking`]).

use serde_json::{Map, Value as J};

use super::{
    cogito, emit_certain, govalue, skip_space, thinking_close_if, Options, Parsed, Parser,
};
// DeepSeek's tool tokens, as its renderer writes them.
pub(super) use crate::prompt::renderers::deepseek3::{
    CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, OUTPUT_BEGIN, OUTPUT_END, SEP,
};
use crate::prompt::Think;

pub(super) const THINK_CLOSE: &str = "</think>";
pub(super) const OUTPUTS_BEGIN: &str = "<｜tool▁outputs▁begin｜>";
pub(super) const OUTPUTS_END: &str = "<｜tool▁outputs▁end｜>";

/// Which of the two families' rules apply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Flavor {
    DeepSeek,
    Cogito,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Thinking,
    Content,
    Calls,
    Output,
}

/// The streaming parser for `deepseek3` and `cogito`.
pub struct DeepSeekTokens {
    flavor: Flavor,
    state: State,
    buf: String,
    /// Leading whitespace of what follows is dropped (after `</think>` or the end of a block).
    trim_lead: bool,
    index: i64,
    starts_thinking: bool,
}

impl DeepSeekTokens {
    /// `deepseek3` (`hasThinkingSupport` true).
    pub fn deepseek3(o: &Options) -> DeepSeekTokens {
        let thinking = o.think.is_some_and(Think::enabled) && !prefilled(o);
        DeepSeekTokens::new(Flavor::DeepSeek, thinking)
    }

    pub(super) fn new(flavor: Flavor, thinking: bool) -> DeepSeekTokens {
        DeepSeekTokens {
            flavor,
            state: if thinking {
                State::Thinking
            } else {
                State::Content
            },
            buf: String::new(),
            trim_lead: false,
            index: 0,
            starts_thinking: thinking,
        }
    }

    /// The tag that opens a model-written tool-output region in content.
    fn output_open(&self) -> &'static str {
        match self.flavor {
            Flavor::DeepSeek => OUTPUT_BEGIN,
            Flavor::Cogito => OUTPUTS_BEGIN,
        }
    }

    fn enter_content(&mut self, rest_at: usize) {
        self.buf.drain(..rest_at);
        self.state = State::Content;
        self.trim_lead = true;
    }

    /// One step; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        if self.trim_lead {
            if !skip_space(&mut self.buf) {
                return false;
            }
            self.trim_lead = false;
        }
        match self.state {
            State::Thinking => {
                if let Some(i) = self.buf.find(THINK_CLOSE) {
                    out.thinking.push_str(self.buf[..i].trim_end());
                    self.enter_content(i + THINK_CLOSE.len());
                    return true;
                }
                emit_certain(&mut self.buf, &[THINK_CLOSE], &mut out.thinking);
                false
            }
            State::Content => {
                let open = self.output_open();
                let calls = self.buf.find(CALLS_BEGIN);
                let output = self.buf.find(open);
                match (calls, output) {
                    (Some(c), o) if o.is_none_or(|o| c < o) => {
                        out.content.push_str(self.buf[..c].trim_end());
                        self.buf.drain(..c + CALLS_BEGIN.len());
                        self.state = State::Calls;
                        true
                    }
                    (_, Some(o)) => {
                        let before = &self.buf[..o];
                        out.content.push_str(match self.flavor {
                            Flavor::DeepSeek => before,
                            Flavor::Cogito => before.trim_end(),
                        });
                        self.buf.drain(..o + open.len());
                        self.state = State::Output;
                        true
                    }
                    _ if done => {
                        out.content.push_str(&std::mem::take(&mut self.buf));
                        false
                    }
                    _ => {
                        // A possible tag and the whitespace before it (trimmed if it is the
                        // calls tag) wait for the next chunk.
                        emit_certain(&mut self.buf, &[CALLS_BEGIN, open], &mut out.content);
                        false
                    }
                }
            }
            State::Calls => self.calls(out),
            State::Output => match self.flavor {
                Flavor::DeepSeek => match self.buf.find(OUTPUT_END) {
                    Some(i) => {
                        out.content.push_str(&self.buf[..i]);
                        self.buf.drain(..i + OUTPUT_END.len());
                        self.state = State::Content;
                        true
                    }
                    None => false,
                },
                Flavor::Cogito => match region(&self.buf, OUTPUT_BEGIN, OUTPUT_END, OUTPUTS_END) {
                    Region::Item(_, next) => {
                        self.buf.drain(..next);
                        true
                    }
                    Region::BlockEnd(next) => {
                        self.enter_content(next);
                        true
                    }
                    Region::Wait => false,
                },
            },
        }
    }

    fn calls(&mut self, out: &mut Parsed) -> bool {
        match region(&self.buf, CALL_BEGIN, CALL_END, CALLS_END) {
            Region::Item(body, next) => {
                let parsed = match self.flavor {
                    Flavor::DeepSeek => call_body(&self.buf[body]),
                    Flavor::Cogito => cogito::call_body(&self.buf[body]),
                };
                match parsed {
                    Some((name, arguments)) => {
                        out.push_call(&mut self.index, name, arguments);
                        self.buf.drain(..next);
                        true
                    }
                    // The rest of the block goes with the broken call.
                    None => match self.buf[next..].find(CALLS_END) {
                        Some(q) => {
                            self.enter_content(next + q + CALLS_END.len());
                            true
                        }
                        None => false,
                    },
                }
            }
            Region::BlockEnd(next) => {
                self.enter_content(next);
                true
            }
            Region::Wait => false,
        }
    }
}

/// What comes first in a block of `open…close` items ended by `end`.
enum Region {
    /// A complete item: its body's range and where the text after its closing tag starts.
    Item(std::ops::Range<usize>, usize),
    /// The block's end tag (before any complete item); where the text after it starts.
    BlockEnd(usize),
    Wait,
}

fn region(buf: &str, open: &str, close: &str, end: &str) -> Region {
    let block_end = |from: usize| buf[from..].find(end).map(|q| from + q + end.len());
    let first_end = buf.find(end);
    match buf.find(open) {
        Some(p) if first_end.is_none_or(|q| p < q) => {
            let start = p + open.len();
            let rest = &buf[start..];
            match (rest.find(close), rest.find(end)) {
                (Some(e), q) if q.is_none_or(|q| e < q) => {
                    Region::Item(start..start + e, start + e + close.len())
                }
                // An item the block's end cuts short is dropped with it.
                _ => block_end(start).map_or(Region::Wait, Region::BlockEnd),
            }
        }
        _ => block_end(0).map_or(Region::Wait, Region::BlockEnd),
    }
}

impl Parser for DeepSeekTokens {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, done) {}
        if done {
            // What Go still holds at the end (thinking whitespace or a partial tag, an unfinished
            // block) is never delivered.
            self.buf.clear();
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, THINK_CLOSE)
    }
}

/// Whether the response continues a non-empty assistant prefill (Go), or a thinking-only one
/// ([`after_thinking`]).
pub(super) fn prefilled(o: &Options) -> bool {
    (o.prefill() && o.last.is_some_and(|m| !m.content.is_empty())) || after_thinking(o)
}

/// A last assistant message with thinking and nothing else: herd's two-pass re-prompt
/// (`engine::two_pass::prefill`) continues after the first pass's thinking, with the format
/// applying from the first token. Ollama keeps its parser instance across the two passes, by then
/// in content; herd builds a new one, which therefore starts in content here too.
pub(super) fn after_thinking(o: &Options) -> bool {
    o.last.is_some_and(|m| {
        m.role == "assistant"
            && m.content.is_empty()
            && m.tool_calls.is_empty()
            && m.thinking.is_some()
    })
}

/// `name<｜tool▁sep｜>{args}`.
fn call_body(body: &str) -> Option<(String, Map<String, J>)> {
    let (name, args) = body.split_once(SEP)?;
    Some((name.trim().to_string(), govalue::arguments(args.trim())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil;
    use crate::prompt::Message;
    use serde_json::json;

    fn ds(think: Option<Think>, last: Option<Message>) -> DeepSeekTokens {
        DeepSeekTokens::deepseek3(&Options {
            think: think.as_ref(),
            last: last.as_ref(),
            ..Default::default()
        })
    }

    fn on() -> DeepSeekTokens {
        ds(Some(Think::Bool(true)), None)
    }

    /// (content, thinking, [(name, args)]) under every chunking, all equal to the one-shot result.
    fn check(make: impl Fn() -> DeepSeekTokens, text: &str, want: (&str, &str, Vec<(&str, J)>)) {
        testutil::check(make, text, (want.0, want.1, &want.2));
    }

    #[test]
    fn init_follows_the_request() {
        assert_eq!(on().thinking_close(), ["</think>"]);
        assert!(ds(None, None).thinking_close().is_empty(), "unset is off");
        assert!(ds(Some(Think::Bool(false)), None)
            .thinking_close()
            .is_empty());
        assert!(!ds(Some(Think::Level("max".into())), None)
            .thinking_close()
            .is_empty());
        let prefill = Message::new("assistant", "So far");
        assert!(ds(Some(Think::Bool(true)), Some(prefill))
            .thinking_close()
            .is_empty());
        // An empty prefill still starts in thinking (Go); a thinking-only one (herd's two-pass
        // re-prompt) continues in content.
        let empty = Message::new("assistant", "");
        assert!(!ds(Some(Think::Bool(true)), Some(empty))
            .thinking_close()
            .is_empty());
        let thought = Message {
            thinking: Some("done".into()),
            ..Message::new("assistant", "")
        };
        let mut p = ds(Some(Think::Bool(true)), Some(thought));
        assert!(p.thinking_close().is_empty());
        assert_eq!(p.add("{\"a\": 1}", true).content, "{\"a\": 1}");
    }

    #[test]
    fn thinking_then_content() {
        check(
            on,
            " Let me think.  \n</think>\n\n Hello  ",
            ("Hello  ", " Let me think.", vec![]),
        );
        // Unterminated thinking loses only the held whitespace and partial tag.
        check(on, "Still going \n</thi", ("", "Still going", vec![]));
        // Thinking off: tags are plain content.
        check(
            || ds(None, None),
            "a</think> b",
            ("a</think> b", "", vec![]),
        );
    }

    #[test]
    fn tool_calls_with_content_before() {
        let text = "Checking.  \n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"opt\": {\"b\": 1.0, \"a\": 2.5}}<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜> noop <｜tool▁sep｜> null <｜tool▁call▁end｜><｜tool▁calls▁end｜>\n Done.";
        check(
            on,
            &format!("hmm</think>{text}"),
            (
                "Checking.Done.",
                "hmm",
                vec![
                    (
                        "get_weather",
                        json!({"city": "Paris", "opt": {"a": 2.5, "b": 1}}),
                    ),
                    ("noop", json!({})),
                ],
            ),
        );
    }

    #[test]
    fn a_broken_call_drops_the_rest_of_its_block() {
        let text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>b<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁call▁begin｜>c<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>after";
        check(
            || ds(None, None),
            text,
            ("after", "", vec![("a", json!({}))]),
        );
        // No separator at all, and a block that never ends.
        let text = "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{}<｜tool▁call▁end｜>tail";
        check(|| ds(None, None), text, ("x", "", vec![]));
        // A call the block's end cuts short.
        let text =
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁calls▁end｜> ok";
        check(|| ds(None, None), text, ("ok", "", vec![]));
    }

    #[test]
    fn tool_output_regions_stay_content() {
        let text = "Result: <｜tool▁output▁begin｜> 22C <｜tool▁output▁end｜> and more";
        check(
            || ds(None, None),
            text,
            ("Result:  22C  and more", "", vec![]),
        );
        // An unfinished region is dropped at the end.
        check(
            || ds(None, None),
            "A <｜tool▁output▁begin｜>partial",
            ("A ", "", vec![]),
        );
    }

    #[test]
    fn partial_tags_are_held_until_known() {
        let mut p = ds(None, None);
        let a = p.add("Hi <｜tool▁ca", false);
        assert_eq!(a.content, "Hi");
        let b = p.add("t", false);
        assert_eq!(b.content, " <｜tool▁cat");
        let c = p.add("  ", true);
        assert_eq!(c.content, "  ");
    }
}
