//! Tag-delimited thinking (`<think>…</think>` for qwen3/deepseek-r1, or whatever tags a Go
//! template puts around `.Thinking`), as Ollama's `thinking.Parser` (`thinking/parser.go`) does
//! it: whitespace before the opening tag, right after it and right after the closing tag is
//! dropped; the thinking itself is only trimmed on the left (`"<think> a </think> b"` gives
//! thinking `"a "`, content `"b"`). A response whose first non-blank text is not the opening tag
//! is all content, untrimmed; only the first closing tag ends the thinking. A prompt that already
//! ends with the opening tag starts the response inside the thinking.
//!
//! What Ollama holds back and never gets to release is dropped at `done`: a response that is
//! only whitespace or a partial opening tag, and a partial closing tag ending unclosed thinking.
//!
//! [`filter_old_thinking`] is Ollama's `filterThinkTags`: earlier assistant turns of qwen3 and
//! deepseek-r1 conversations lose their `<think>…</think>` block before rendering.

use super::{partial_tag_len, Parsed, Parser};
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
                } else if self.open.starts_with(t) {
                    // Blank or possibly the opening tag: keep waiting (at `done`, Ollama never
                    // releases it).
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
                    out.thinking.push_str(&self.buf[..i]);
                    self.buf = self.buf[i + self.close.len()..].to_string();
                    self.state = State::AfterClose;
                } else {
                    // Hold back a possible partial closing tag (dropped at `done`, as Ollama
                    // never releases it).
                    let keep = partial_tag_len(&self.buf, &[&self.close]);
                    let emit = self.buf.len() - keep;
                    out.thinking.push_str(&self.buf[..emit]);
                    self.buf.drain(..emit);
                    if done {
                        self.buf.clear();
                    }
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

    /// Every chunking of `s` gives (thinking, content).
    fn check(pre: bool, s: &str, thinking: &str, content: &str) {
        every_split(s, |chunks| {
            let r = run(&mut p(pre), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (thinking, content),
                "{chunks:?}"
            );
        });
    }

    #[test]
    fn thinking_is_trimmed_on_the_left_only() {
        check(
            false,
            "  <think>\n I should greet.  \n</think>\n\nHello there ",
            "I should greet.  \n",
            "Hello there ",
        );
        check(
            false,
            "<think> internal </think> world",
            "internal ",
            "world",
        );
        check(
            false,
            "  <think>   \t   these are some thoughts </think>  \n more",
            "these are some thoughts ",
            "more",
        );
        check(false, "<think>\n</think>\n\nHi there", "", "Hi there");
    }

    #[test]
    fn only_the_first_closing_tag_ends_the_thinking() {
        check(
            false,
            "<think>a</think><think>b</think>c",
            "a",
            "<think>b</think>c",
        );
        check(
            false,
            "<think>abc</thing>def</think>x",
            "abc</thing>def",
            "x",
        );
    }

    #[test]
    fn pre_opened_tag_starts_inside_the_thinking() {
        check(true, " hmm, 2+2 </think>4", "hmm, 2+2 ", "4");
    }

    #[test]
    fn no_opening_tag_is_all_content_untrimmed() {
        check(
            false,
            "  abc <think>def</think> ghi",
            "",
            "  abc <think>def</think> ghi",
        );
        check(
            false,
            "<thonk> not thinking </think>",
            "",
            "<thonk> not thinking </think>",
        );
    }

    #[test]
    fn what_ollama_never_releases_is_dropped_at_done() {
        check(false, "<think>still going </thi", "still going ", "");
        check(false, "<think>still going", "still going", "");
        check(false, "  <thi", "", "");
        check(false, " \n ", "", "");
    }

    #[test]
    fn partial_close_is_held_back_until_known() {
        let mut t = p(true);
        let a = t.add("a </th", false);
        assert_eq!(a.thinking, "a ");
        let b = t.add("at", false);
        assert_eq!(b.thinking, "</that");
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
