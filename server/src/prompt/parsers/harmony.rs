//! OpenAI harmony (gpt-oss): the response is a sequence of messages
//! `[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][<|constrain|>json]<|message|>BODY<|end|>`
//! (the first `<|start|>assistant` is in the prompt). `analysis` → thinking; `analysis` or
//! `commentary` with a recipient `to=[functions.]NAME` (before or after the channel) → a tool call
//! to NAME, whichever tools the request has, whose body is the JSON arguments; everything else →
//! content. `<|call|>`/`<|return|>` end a message too (the runner usually stops on them, so a
//! body may also end with the stream).
//!
//! `thinking_close`: the final message's header, `<|channel|>final<|message|>` — the content
//! starts after it (DESIGN 7: models that open a new message before content end thinking there).

use super::{partial_tag_len, thinking_close_if, Parsed, Parser};
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
    prefill: bool,
    state: State,
    buf: String,
    args: String,
    index: i64,
}

impl Harmony {
    /// `prefill`: the response continues an assistant message's content (see
    /// [`super::deepseek3::prefilled`]); otherwise it starts with a header.
    pub fn new(prefill: bool) -> Harmony {
        Harmony {
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

    /// What a header (`<|channel|>commentary to=functions.f <|constrain|>json`) opens, read as
    /// Ollama's `parseHeader` reads it: the channel is the word after `<|channel|>`; with that
    /// removed, the first word is the role and a recipient is `to=NAME` as the role or the word
    /// after it. `analysis` and `commentary` with a recipient are a call to it (a `functions.`
    /// prefix dropped), `analysis` otherwise thinking, anything else content.
    fn body_for(header: &str) -> Body {
        // The message's own header: the first message's `<|start|>assistant` is in the prompt.
        let mut raw = match header.rfind("<|start|>") {
            Some(i) => header[i + "<|start|>".len()..].to_string(),
            None => format!("assistant{header}"),
        };
        raw = raw.replacen("<|constrain|>", " <|constrain|>", 1);
        let mut channel = String::new();
        if let Some(i) = raw.find("<|channel|>") {
            let after = &raw[i + "<|channel|>".len()..];
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            channel = after[..end].to_string();
            raw = format!("{}{}", &raw[..i], &after[end..]);
        }
        let words: Vec<&str> = raw.split_whitespace().collect();
        let recipient = match words.as_slice() {
            [role, ..] if role.starts_with("to=") => &role[3..],
            [_, second, ..] if second.starts_with("to=") => &second[3..],
            _ => "",
        };
        match channel.as_str() {
            "analysis" | "commentary" if !recipient.is_empty() => Body::Call(
                recipient
                    .strip_prefix("functions.")
                    .unwrap_or(recipient)
                    .to_string(),
            ),
            "analysis" => Body::Thinking,
            _ => Body::Content,
        }
    }

    fn finish_call(&mut self, name: &str, out: &mut Parsed) {
        let raw = std::mem::take(&mut self.args);
        let arguments = match serde_json::from_str::<Value>(raw.trim()) {
            Ok(Value::Object(m)) => m,
            // Go decodes `null` into the arguments map without error: no arguments.
            Ok(Value::Null) => Map::new(),
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
                    let body = Self::body_for(&self.buf[..i]);
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
        thinking_close_if(!self.prefill, FINAL_HEADER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};

    const STREAM: &str = "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\",\"days\":2}<|call|><|start|>assistant<|channel|>final<|message|>It is cold.";

    #[test]
    fn channels_map_to_thinking_tool_calls_and_content() {
        every_split(STREAM, |chunks| {
            let r = run(&mut Harmony::new(false), chunks);
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
            let r = run(&mut Harmony::new(false), chunks);
            assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
            assert_eq!(r.tool_calls[0].arguments["a"], 1);
        });
    }

    #[test]
    fn thinking_close_is_the_final_header_unless_prefilled() {
        assert_eq!(Harmony::new(false).thinking_close(), [FINAL_HEADER]);
        assert!(Harmony::new(true).thinking_close().is_empty());
        let r = run(&mut Harmony::new(true), &["more text<|return|>"]);
        assert_eq!(r.content, "more text");
    }

    #[test]
    fn headers_read_as_ollama_reads_them() {
        // (response, thinking, content, calls as name + arguments)
        type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);
        let cases: &[Case] = &[
            // The recipient may come before the channel.
            ("<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
                "hm", "", &[("get_weather", r#"{"city":"Oslo"}"#)]),
            (" to=functions.f<|channel|>commentary json<|message|>{}", "", "", &[("f", "{}")]),
            // A tool the request did not name, and a built-in one, are calls too.
            ("<|channel|>commentary to=browser.search<|constrain|>json<|message|>{\"q\":1}",
                "", "", &[("browser.search", r#"{"q":1}"#)]),
            ("<|channel|>analysis to=functions.run code<|message|>{}", "", "", &[("run", "{}")]),
            // Only analysis and commentary carry calls; `to=` must be the role or the next word.
            ("<|channel|>final to=functions.f<|message|>hi", "", "hi", &[]),
            ("<|channel|>commentary x to=functions.f<|message|>hi", "", "hi", &[]),
            ("<|channel|>analysis extra<|message|>t<|end|><|start|>assistant<|channel|>other<|message|>c",
                "t", "c", &[]),
        ];
        for (stream, thinking, content, calls) in cases {
            every_split(stream, |chunks| {
                let r = run(&mut Harmony::new(false), chunks);
                assert_eq!(
                    (r.thinking.as_str(), r.content.as_str()),
                    (*thinking, *content),
                    "{chunks:?}"
                );
                let got: Vec<(String, String)> = r
                    .tool_calls
                    .iter()
                    .map(|c| (c.name.clone(), serde_json::to_string(&c.arguments).unwrap()))
                    .collect();
                let want: Vec<(String, String)> = calls
                    .iter()
                    .map(|(n, a)| (n.to_string(), a.to_string()))
                    .collect();
                assert_eq!(got, want, "{chunks:?}");
            });
        }
    }

    #[test]
    fn null_arguments_are_no_arguments() {
        let s = "<|channel|>commentary to=functions.now <|constrain|>json<|message|>null";
        every_split(s, |chunks| {
            let r = run(&mut Harmony::new(false), chunks);
            assert_eq!(r.content, "", "{chunks:?}");
            assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
            assert!(r.tool_calls[0].arguments.is_empty());
        });
    }

    #[test]
    fn only_an_assistant_message_with_content_is_continued() {
        use super::super::{for_model, Options};
        use crate::prompt::{Message, Template};
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        let content = |last: &Message| {
            let o = Options {
                named: "harmony",
                last: Some(last),
                ..Default::default()
            };
            run(
                for_model(&t, &o).as_mut(),
                &["<|channel|>final<|message|>x"],
            )
            .content
        };
        // An empty assistant message: the response starts with a header, as in Ollama.
        assert_eq!(content(&Message::new("assistant", "")), "x");
        assert_eq!(
            content(&Message::new("assistant", "Sure")),
            "<|channel|>final<|message|>x"
        );
    }

    #[test]
    fn final_only_response() {
        every_split("<|channel|>final<|message|>Hi!<|return|>", |chunks| {
            let r = run(&mut Harmony::new(false), chunks);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("", "Hi!"));
        });
    }
}
