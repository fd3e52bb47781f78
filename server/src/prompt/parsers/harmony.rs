//! OpenAI harmony (gpt-oss): the response is a sequence of messages
//! `[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][<|constrain|>json]<|message|>BODY<|end|>`
//! (the first `<|start|>assistant` is in the prompt). `analysis` → thinking; `commentary` with
//! `to=functions.NAME` → a tool call whose body is the JSON arguments; `final` (and commentary
//! without a recipient) → content. `<|call|>`/`<|return|>` end a message too (the runner usually
//! stops on them, so a body may also end with the stream).
//!
//! `thinking_close`: the final message's header, `<|channel|>final<|message|>` — the content
//! starts after it (DESIGN 7: models that open a new message before content end thinking there).

use super::{partial_tag_len, Parsed, Parser};
use serde_json::{Map, Value};

const ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];
pub const FINAL_HEADER: &str = "<|channel|>final<|message|>";

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Thinking,
    Content,
    /// A call to this function; the body accumulates in `args`.
    Call(String),
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Header,
    Body(Body),
}

pub struct Harmony {
    tools: Vec<String>,
    prefill: bool,
    state: State,
    buf: String,
    args: String,
    index: i64,
}

impl Harmony {
    pub fn new(tools: &[String], prefill: bool) -> Harmony {
        Harmony {
            tools: tools.to_vec(),
            prefill,
            // A prefilled assistant message is content the response continues.
            state: if prefill {
                State::Body(Body::Content)
            } else {
                State::Header
            },
            buf: String::new(),
            args: String::new(),
            index: 0,
        }
    }

    /// What a header (`<|channel|>commentary to=functions.f <|constrain|>json`) opens.
    fn body_for(&self, header: &str) -> Body {
        let h = header
            .replace("<|start|>", " ")
            .replace("<|constrain|>", " <|constrain|>");
        let mut channel = "";
        let mut recipient = "";
        if let Some(i) = h.find("<|channel|>") {
            channel = h[i + "<|channel|>".len()..]
                .split_whitespace()
                .next()
                .unwrap_or("");
        }
        if let Some(i) = h.find("to=") {
            recipient = h[i + 3..].split_whitespace().next().unwrap_or("");
        }
        let channel = channel.split(" to=").next().unwrap_or(channel);
        if let Some(name) = recipient.strip_prefix("functions.") {
            return Body::Call(name.to_string());
        }
        match channel {
            "analysis" => Body::Thinking,
            _ => Body::Content,
        }
    }

    fn finish_call(&mut self, name: &str, out: &mut Parsed) {
        let raw = std::mem::take(&mut self.args);
        let arguments = match serde_json::from_str::<Value>(raw.trim()) {
            Ok(Value::Object(m)) => m,
            Ok(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            },
            _ if raw.trim().is_empty() => Map::new(),
            // Unparseable arguments: deliver what the model wrote rather than lose it.
            _ => {
                out.content.push_str(&raw);
                return;
            }
        };
        if !self.tools.is_empty() && !self.tools.iter().any(|t| t == name) {
            out.content.push_str(&raw);
            return;
        }
        out.push_call(&mut self.index, name.to_string(), arguments);
    }

    fn emit(body: &Body, text: &str, out: &mut Parsed, args: &mut String) {
        match body {
            Body::Thinking => out.thinking.push_str(text),
            Body::Content => out.content.push_str(text),
            Body::Call(_) => args.push_str(text),
        }
    }

    fn step(&mut self, out: &mut Parsed, done: bool) {
        match self.state.clone() {
            State::Header => {
                if let Some(i) = self.buf.find("<|message|>") {
                    let body = self.body_for(&self.buf[..i]);
                    self.buf.drain(..i + "<|message|>".len());
                    self.state = State::Body(body);
                } else if done {
                    // Never a header: whatever it was, it is content.
                    let rest = std::mem::take(&mut self.buf);
                    out.content
                        .push_str(rest.trim_start_matches("<|start|>assistant"));
                }
            }
            State::Body(body) => {
                let end = ENDS
                    .iter()
                    .filter_map(|e| self.buf.find(e).map(|i| (i, *e)))
                    .min();
                if let Some((i, tag)) = end {
                    let text = self.buf[..i].to_string();
                    Self::emit(&body, &text, out, &mut self.args);
                    let skip = if tag == "<|start|>" { 0 } else { tag.len() };
                    self.buf.drain(..i + skip);
                    if let Body::Call(name) = &body {
                        self.finish_call(name, out);
                    }
                    self.state = State::Header;
                } else {
                    let keep = if done {
                        0
                    } else {
                        partial_tag_len(&self.buf, &ENDS)
                    };
                    let text: String = self.buf.drain(..self.buf.len() - keep).collect();
                    Self::emit(&body, &text, out, &mut self.args);
                    if done {
                        if let Body::Call(name) = &body {
                            self.finish_call(name, out);
                        }
                        // Done inside a body: the next step must not re-finish it.
                        self.state = State::Header;
                    }
                }
            }
        }
    }
}

impl Parser for Harmony {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        loop {
            let before = (self.state.clone(), self.buf.len());
            self.step(&mut out, done);
            if (self.state.clone(), self.buf.len()) == before {
                break;
            }
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        if self.prefill {
            Vec::new()
        } else {
            vec![FINAL_HEADER.to_string()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};

    const STREAM: &str = "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\",\"days\":2}<|call|><|start|>assistant<|channel|>final<|message|>It is cold.";

    #[test]
    fn channels_map_to_thinking_tool_calls_and_content() {
        let tools = vec!["get_weather".to_string()];
        every_split(STREAM, |chunks| {
            let r = run(&mut Harmony::new(&tools, false), chunks);
            assert_eq!(r.thinking, "User wants weather.", "{chunks:?}");
            assert_eq!(r.content, "It is cold.", "{chunks:?}");
            assert_eq!(r.tool_calls.len(), 1);
            let c = &r.tool_calls[0];
            assert_eq!((c.name.as_str(), c.index), ("get_weather", 0));
            assert_eq!(c.arguments.keys().collect::<Vec<_>>(), ["city", "days"]);
        });
    }

    #[test]
    fn call_ending_with_the_stream_is_still_a_call() {
        let s = "<|channel|>commentary to=functions.add<|message|>{\"a\":1}";
        every_split(s, |chunks| {
            let r = run(&mut Harmony::new(&[], false), chunks);
            assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
            assert_eq!(r.tool_calls[0].arguments["a"], 1);
        });
    }

    #[test]
    fn thinking_close_is_the_final_header_unless_prefilled() {
        assert_eq!(Harmony::new(&[], false).thinking_close(), [FINAL_HEADER]);
        assert!(Harmony::new(&[], true).thinking_close().is_empty());
        let r = run(&mut Harmony::new(&[], true), &["more text<|return|>"]);
        assert_eq!(r.content, "more text");
    }

    #[test]
    fn final_only_response() {
        every_split("<|channel|>final<|message|>Hi!<|return|>", |chunks| {
            let r = run(&mut Harmony::new(&[], false), chunks);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("", "Hi!"));
        });
    }
}
