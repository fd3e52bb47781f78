//! Tag-delimited thinking (`<think>…</think>` for qwen3/deepseek-r1, or whatever tags a Go
//! template puts around `.Thinking`), as Ollama's thinking parser does it: whitespace before the
//! opening tag and around the thinking is trimmed, whitespace after the closing tag is dropped,
//! and a prompt that already ends with the opening tag starts the response inside the thinking.
//! A response that does not begin with the opening tag is all content.
//!
//! [`filter_old_thinking`] is Ollama's `filterThinkTags`: earlier assistant turns of qwen3 and
//! deepseek-r1 conversations lose their `<think>…</think>` block before rendering.

use super::{emit_certain, Parsed, Parser};
use crate::prompt::Message;

/// Whether Ollama strips thinking from earlier assistant turns for this model: the config's
/// model family is `qwen3`, or the name's model part is `deepseek-r1` (exactly those two; Ollama
/// keys it on the family and name, not on the thinking capability).
pub fn strips_old_thinking(model_family: &str, model_name: &str) -> bool {
    model_family == "qwen3" || model_name == "deepseek-r1"
}

/// Removes a leading `<think>…</think>` block (and the whitespace around it) from every
/// assistant message before the last user message; later assistant messages (a prefill, or
/// turns after the last user message such as tool-call rounds) keep theirs. A message whose
/// block never closes keeps no content, as Ollama's parser reads it all as thinking.
pub fn filter_old_thinking(msgs: &mut [Message]) {
    let Some(last_user) = msgs.iter().rposition(|m| m.role == "user") else {
        return;
    };
    for m in &mut msgs[..last_user] {
        if m.role == "assistant" {
            let mut p = TagThinking::new("<think>", "</think>", false);
            m.content = p.add(&m.content, true).content;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Before anything but whitespace: waiting to see whether the opening tag comes.
    Opening,
    /// Inside the thinking, nothing emitted yet (leading whitespace is dropped).
    ThinkingStart,
    Thinking,
    /// Just after the closing tag (leading whitespace is dropped).
    AfterClose,
    Content,
}

pub struct TagThinking {
    open: String,
    close: String,
    state: State,
    buf: String,
}

impl TagThinking {
    pub fn new(open: &str, close: &str, pre_opened: bool) -> TagThinking {
        TagThinking {
            open: open.to_string(),
            close: close.to_string(),
            state: if pre_opened {
                State::ThinkingStart
            } else {
                State::Opening
            },
            buf: String::new(),
        }
    }
}

impl Parser for TagThinking {
    fn thinking_close(&self) -> Vec<String> {
        vec![self.close.clone()]
    }

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
}

impl TagThinking {
    fn step(&mut self, out: &mut Parsed, done: bool) {
        match self.state {
            State::Opening => {
                let t = self.buf.trim_start();
                if t.starts_with(self.open.as_str()) {
                    self.buf = t[self.open.len()..].to_string();
                    self.state = State::ThinkingStart;
                } else if t.is_empty() || (self.open.starts_with(t) && !done) {
                    // Still possibly the opening tag; keep waiting.
                    if done {
                        self.buf.clear();
                    }
                } else {
                    self.state = State::Content;
                }
            }
            State::ThinkingStart => {
                let t = self.buf.trim_start();
                if t.len() != self.buf.len() {
                    self.buf = t.to_string();
                }
                if !self.buf.is_empty() {
                    self.state = State::Thinking;
                } else if done {
                    self.state = State::Content;
                }
            }
            State::Thinking => {
                if let Some(i) = self.buf.find(self.close.as_str()) {
                    out.thinking.push_str(self.buf[..i].trim_end());
                    self.buf = self.buf[i + self.close.len()..].to_string();
                    self.state = State::AfterClose;
                } else if done {
                    out.thinking.push_str(self.buf.trim_end());
                    self.buf.clear();
                } else {
                    // Hold back a possible partial closing tag and the whitespace before it
                    // (trimmed if the tag follows).
                    emit_certain(&mut self.buf, &[&self.close], &mut out.thinking);
                }
            }
            State::AfterClose => {
                let t = self.buf.trim_start();
                if !t.is_empty() {
                    self.buf = t.to_string();
                    self.state = State::Content;
                } else {
                    self.buf.clear();
                }
            }
            State::Content => {
                out.content.push_str(&self.buf);
                self.buf.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};

    fn p(pre: bool) -> TagThinking {
        TagThinking::new("<think>", "</think>", pre)
    }

    #[test]
    fn thinking_then_content_under_every_split() {
        every_split(
            "  <think>\n I should greet.  \n</think>\n\nHello there",
            |chunks| {
                let r = run(&mut p(false), chunks);
                assert_eq!(r.thinking, "I should greet.", "{chunks:?}");
                assert_eq!(r.content, "Hello there", "{chunks:?}");
            },
        );
    }

    #[test]
    fn pre_opened_tag_starts_inside_the_thinking() {
        every_split("hmm, 2+2</think>4", |chunks| {
            let r = run(&mut p(true), chunks);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("hmm, 2+2", "4"));
        });
    }

    #[test]
    fn no_opening_tag_is_all_content() {
        every_split("<thonk> not thinking </think>", |chunks| {
            let r = run(&mut p(false), chunks);
            assert_eq!(r.thinking, "");
            assert_eq!(r.content, "<thonk> not thinking </think>");
        });
    }

    #[test]
    fn unterminated_thinking_is_delivered_at_done() {
        every_split("<think>still going </thi", |chunks| {
            let r = run(&mut p(false), chunks);
            assert_eq!(r.thinking, "still going </thi");
            assert_eq!(r.content, "");
        });
    }

    #[test]
    fn partial_close_is_held_back_until_known() {
        let mut t = p(true);
        let a = t.add("a </th", false);
        assert_eq!(a.thinking, "a");
        let b = t.add("at", false);
        assert_eq!(b.thinking, " </that");
        assert_eq!(t.thinking_close(), vec!["</think>"]);
    }

    #[test]
    fn old_assistant_turns_lose_their_thinking() {
        let m = |role: &str, content: &str| Message::new(role, content);
        let mut msgs = vec![
            m("system", "<think>kept</think>sys"),
            m("user", "q1"),
            m("assistant", "<think>\nfirst thoughts\n</think>\n\nA1"),
            m("assistant", "no tags here <think>x</think>"),
            m("user", "q2"),
            m("assistant", "<think>never closed"),
            m("user", "q3"),
            m("assistant", "<think>prefill thoughts</think>partial"),
        ];
        filter_old_thinking(&mut msgs);
        let got: Vec<&str> = msgs.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            got,
            [
                "<think>kept</think>sys",
                "q1",
                "A1",
                "no tags here <think>x</think>",
                "q2",
                "",
                "q3",
                // After the last user message: untouched.
                "<think>prefill thoughts</think>partial",
            ]
        );
        // No user message: nothing is "earlier".
        let mut only = vec![m("assistant", "<think>t</think>a")];
        filter_old_thinking(&mut only);
        assert_eq!(only[0].content, "<think>t</think>a");
    }

    #[test]
    fn only_qwen3_family_and_deepseek_r1_strip() {
        let cases = [
            ("qwen3", "anything", true),
            ("llama", "deepseek-r1", true),
            ("qwen2", "qwen3", false),
            ("qwen3moe", "x", false),
            ("llama", "deepseek-r1-distill", false),
            ("", "", false),
        ];
        for (family, name, want) in cases {
            assert_eq!(strips_old_thinking(family, name), want, "{family} {name}");
        }
    }

    #[test]
    fn gemma_style_custom_tags() {
        let mut t = TagThinking::new("<start_of_thought>", "<end_of_thought>", false);
        let r = run(&mut t, &["<start_of_thought>x<end_", "of_thought>y"]);
        assert_eq!((r.thinking.as_str(), r.content.as_str()), ("x", "y"));
    }
}
