//! Tag-delimited thinking (`<think>…</think>` for qwen3/deepseek-r1, or whatever tags a Go
//! template puts around `.Thinking`), as Ollama's thinking parser does it: whitespace before the
//! opening tag and around the thinking is trimmed, whitespace after the closing tag is dropped,
//! and a prompt that already ends with the opening tag starts the response inside the thinking.
//! A response that does not begin with the opening tag is all content.

use super::{partial_tag_len, Parsed, Parser};

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
                    let keep = partial_tag_len(&self.buf, &[&self.close]);
                    let emit = self.buf[..self.buf.len() - keep].trim_end().len();
                    out.thinking.push_str(&self.buf[..emit]);
                    self.buf.drain(..emit);
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
    fn gemma_style_custom_tags() {
        let mut t = TagThinking::new("<start_of_thought>", "<end_of_thought>", false);
        let r = run(&mut t, &["<start_of_thought>x<end_", "of_thought>y"]);
        assert_eq!((r.thinking.as_str(), r.content.as_str()), ("x", "y"));
    }
}
