//! OpenAI harmony (gpt-oss): the response is a sequence of messages
//! `[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][<|constrain|>json]<|message|>BODY<|end|>`
//! (the first `<|start|>assistant` is in the prompt). `analysis` → thinking; `analysis` or
//! `commentary` with a recipient `to=[functions.]NAME` (before or after the channel) → a tool call
//! to NAME, whichever tools the request has, whose body is the JSON arguments; everything else →
//! content. `<|call|>`/`<|return|>` end a message too (the runner usually stops on them, so a
//! body may also end with the stream).
//!
//! As Ollama's `HarmonyMessageHandler`:
//! - the prompt named the request's tools by their harmony names ([`super::harmony_names`]);
//!   a call to one comes back under the client's name;
//! - tool calls are delivered with the response's last chunk (Ollama parses them when the
//!   stream is done), after any content streamed before them;
//! - a last assistant message with content is continued as content, one with only thinking as
//!   thinking; otherwise the response starts with a message header.
//!
//! Lenient where Ollama fails or drops text: arguments that are not JSON are delivered as
//! content (Ollama fails the request); each call message is its own call (Ollama joins the
//! bodies of several into one unparseable call); a body also ends at `<|call|>`, `<|return|>` or
//! a new `<|start|>`; text without harmony tags that never gets a header is content.
//!
//! `thinking_close`: the final message's header, `<|channel|>final<|message|>` — the content
//! starts after it (DESIGN 7: models that open a new message before content end thinking there).

use super::harmony_names::ToolNames;
use super::{govalue, partial_tag_len, thinking_close_if, Options, Parsed, Parser};
use crate::prompt::Think;
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
    /// Where the response starts: at a header, or inside a body the prompt opened (a prefill).
    start: State,
    state: State,
    buf: String,
    args: String,
    index: i64,
    /// The request's tools by harmony name.
    names: ToolNames,
    /// Finished calls, held for the last chunk.
    calls: Parsed,
}

impl Harmony {
    /// Ollama's `Init`: `o.schemas` are the request's tools as the client sent them; `o.last`
    /// an assistant message the prompt ends with (a prefill); `o.prompt` the rendered prompt.
    pub fn new(o: &Options) -> Harmony {
        let prefill = o.last.filter(|m| m.role == "assistant");
        let start = if o.prompt.ends_with(FINAL_HEADER) {
            // The prompt opened the final message itself (herd's two-pass re-prompt).
            State::Body(Body::Content)
        } else {
            match prefill {
                Some(m) if !m.content.is_empty() => State::Body(Body::Content),
                Some(m) if m.thinking.as_deref().is_some_and(|t| !t.is_empty()) => {
                    State::Body(Body::Thinking)
                }
                _ => State::Header,
            }
        };
        Harmony {
            state: start.clone(),
            start,
            buf: String::new(),
            args: String::new(),
            index: 0,
            names: ToolNames::of(o.schemas),
            calls: Parsed::default(),
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
        let arguments = match govalue::decode(raw.trim()) {
            Some(Value::Object(m)) => m,
            // Go decodes `null` into the arguments map without error: no arguments.
            Some(Value::Null) => Map::new(),
            Some(Value::String(s)) => match govalue::decode(&s) {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            },
            _ if raw.trim().is_empty() => Map::new(),
            // Unparseable arguments: deliver what the model wrote rather than lose it.
            _ => {
                out.content.push_str(&raw);
                return;
            }
        };
        let name = self.names.client(name).to_owned();
        self.calls.push_call(&mut self.index, name, arguments);
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
                    // Never a header. Text without harmony tags is content; a header the
                    // stream cut short is dropped, as Ollama drops it.
                    let rest = std::mem::take(&mut self.buf);
                    let rest = rest.trim_start_matches("<|start|>assistant");
                    if !rest.contains("<|") {
                        out.content.push_str(rest);
                    }
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
        if done {
            out.tool_calls.append(&mut self.calls.tool_calls);
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.start != State::Body(Body::Content), FINAL_HEADER)
    }
}

/// Ollama's harmony prompt reads only `low`, `medium` and `high`: for a harmony model
/// ([`super::is_harmony`]) a `max` request thinks `high`.
pub fn think(t: Option<Think>) -> Option<Think> {
    match t {
        Some(Think::Level(l)) if l == "max" => Some(Think::Level("high".into())),
        t => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use crate::prompt::Message;
    use serde_json::json;

    const STREAM: &str = "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\",\"days\":2}<|call|><|start|>assistant<|channel|>final<|message|>It is cold.";

    /// A response to a request without tools or prefill.
    fn fresh() -> Harmony {
        Harmony::new(&Options::default())
    }

    fn with_last(last: &Message) -> Harmony {
        Harmony::new(&Options {
            last: Some(last),
            ..Default::default()
        })
    }

    fn calls(r: &Parsed) -> Vec<(String, String)> {
        r.tool_calls
            .iter()
            .map(|c| (c.name.clone(), serde_json::to_string(&c.arguments).unwrap()))
            .collect()
    }

    #[test]
    fn channels_map_to_thinking_tool_calls_and_content() {
        every_split(STREAM, |chunks| {
            let r = run(&mut fresh(), chunks);
            assert_eq!(r.thinking, "User wants weather.", "{chunks:?}");
            assert_eq!(r.content, "It is cold.", "{chunks:?}");
            assert_eq!(r.tool_calls.len(), 1);
            let c = &r.tool_calls[0];
            assert_eq!((c.name.as_str(), c.index), ("get_weather", 0));
            assert_eq!(c.arguments.keys().collect::<Vec<_>>(), ["city", "days"]);
        });
    }

    #[test]
    fn calls_come_with_the_last_chunk() {
        // Ollama parses a response's calls once the stream is done: content written after the
        // call streams first, the call comes with the last chunk.
        let mut p = fresh();
        let a = p.add(
            "<|channel|>commentary to=functions.get_weather<|message|>{\"location\":\"SF\"}<|end|>",
            false,
        );
        assert!(a.is_empty(), "{a:?}");
        let b = p.add(
            "<|start|>assistant<|message|>The weather is sunny<|end|>",
            false,
        );
        assert_eq!(b.content, "The weather is sunny");
        assert!(b.tool_calls.is_empty());
        let c = p.add("", true);
        assert_eq!(
            calls(&c),
            [("get_weather".into(), r#"{"location":"SF"}"#.into())]
        );
        assert_eq!(c.content, "");
        // Arguments split over chunks: nothing until the end.
        let mut p = fresh();
        for part in [
            "<|channel|>commentary to=functions.calculate<|message|>{\"expr",
            "ession\":\"2+",
        ] {
            assert!(p.add(part, false).is_empty());
        }
        let r = p.add("2\"}", true);
        assert_eq!(
            calls(&r),
            [("calculate".into(), r#"{"expression":"2+2"}"#.into())]
        );
    }

    #[test]
    fn calls_come_back_under_the_clients_names() {
        let tools = [
            json!({"type": "function", "function": {"name": "get-weather"}}),
            json!({"type": "function", "function": {"name": "get weather"}}),
            json!({"type": "function", "function": {"name": "browser.search"}}),
        ];
        let o = Options {
            schemas: &tools,
            ..Default::default()
        };
        let cases = [
            ("functions.get_weather", "get-weather"),
            ("get_weather", "get-weather"),
            ("functions.get_weather_2", "get weather"),
            ("browser.search", "browser.search"),
            // Names no tool was given under are the model's own.
            ("functions.get-weather", "get-weather"),
            ("functions.lookup", "lookup"),
            ("python", "python"),
        ];
        for (recipient, client) in cases {
            let s =
                format!("<|channel|>commentary to={recipient} <|constrain|>json<|message|>{{}}");
            every_split(&s, |chunks| {
                let r = run(&mut Harmony::new(&o), chunks);
                assert_eq!(
                    calls(&r),
                    [(client.to_string(), "{}".to_string())],
                    "{chunks:?}"
                );
            });
        }
    }

    #[test]
    fn call_ending_with_the_stream_is_still_a_call() {
        let s = "<|channel|>commentary to=functions.add<|message|>{\"a\":1}";
        every_split(s, |chunks| {
            let r = run(&mut fresh(), chunks);
            assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
            assert_eq!(r.tool_calls[0].arguments["a"], 1);
        });
    }

    #[test]
    fn several_calls_each_stand_alone() {
        let s = "<|channel|>commentary to=functions.a<|message|>{\"x\":1}<|call|><|start|>assistant<|channel|>commentary to=functions.b<|message|>{\"y\":2}<|call|>";
        every_split(s, |chunks| {
            let r = run(&mut fresh(), chunks);
            assert_eq!(
                calls(&r),
                [
                    ("a".into(), r#"{"x":1}"#.into()),
                    ("b".into(), r#"{"y":2}"#.into())
                ]
            );
            assert_eq!((r.tool_calls[0].index, r.tool_calls[1].index), (0, 1));
        });
    }

    #[test]
    fn where_the_response_starts() {
        let thinking_only = Message {
            thinking: Some("Let me see".into()),
            ..Message::new("assistant", "")
        };
        let empty_thinking = Message {
            thinking: Some(String::new()),
            ..Message::new("assistant", "")
        };
        // (parser, thinking, content, closes at the final header)
        let cases: Vec<(Harmony, &str, &str, bool)> = vec![
            (fresh(), "", "x", true),
            (with_last(&Message::new("user", "hi")), "", "x", true),
            // An empty assistant message: the response starts with a header.
            (with_last(&Message::new("assistant", "")), "", "x", true),
            (with_last(&empty_thinking), "", "x", true),
            // Content is continued as content…
            (
                with_last(&Message::new("assistant", "Sure")),
                "",
                "<|channel|>final<|message|>x",
                false,
            ),
            // …thinking as thinking, until its message ends.
            (
                with_last(&thinking_only),
                "<|channel|>final<|message|>x",
                "",
                true,
            ),
            // The prompt opened the final message (two-pass): content.
            (
                Harmony::new(&Options {
                    last: Some(&thinking_only),
                    prompt: "…<|start|>assistant<|channel|>final<|message|>",
                    ..Default::default()
                }),
                "",
                "<|channel|>final<|message|>x",
                false,
            ),
        ];
        for (i, (mut p, thinking, content, closes)) in cases.into_iter().enumerate() {
            assert_eq!(!p.thinking_close().is_empty(), closes, "case {i}");
            let r = run(&mut p, &["<|channel|>final<|message|>x"]);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (thinking, content),
                "case {i}"
            );
        }
        let r = run(
            &mut with_last(&thinking_only),
            &[" more.<|end|><|start|>assistant<|channel|>final<|message|>Done"],
        );
        assert_eq!(
            (r.thinking.as_str(), r.content.as_str()),
            (" more.", "Done")
        );
        let r = run(
            &mut with_last(&Message::new("assistant", "Sure")),
            &["more text<|return|>"],
        );
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
            // No channel at all: content (Ollama's route tests stream these).
            ("<|message|>Hello, world!<|end|>", "", "Hello, world!", &[]),
            ("<|channel|>analysis<|message|>Think<|end|><|start|>assistant<|message|>Answer<|end|>",
                "Think", "Answer", &[]),
            // A commentary message without a recipient is content (a preamble).
            ("<|channel|>commentary<|message|>Checking.<|end|>", "", "Checking.", &[]),
            // Text with no header at all is content; a header cut short by the end is dropped.
            ("Hello there", "", "Hello there", &[]),
            ("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", "x", "", &[]),
            ("<|channel|>analysis<|message|>x<|end|><|start|>assistant", "x", "", &[]),
            ("<|chan", "", "", &[]),
        ];
        for (stream, thinking, content, want) in cases {
            every_split(stream, |chunks| {
                let r = run(&mut fresh(), chunks);
                assert_eq!(
                    (r.thinking.as_str(), r.content.as_str()),
                    (*thinking, *content),
                    "{chunks:?}"
                );
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|(n, a)| (n.to_string(), a.to_string()))
                    .collect();
                assert_eq!(calls(&r), want, "{chunks:?}");
            });
        }
    }

    #[test]
    fn arguments_that_are_not_an_object() {
        // (body, content, arguments of the one call or None)
        let cases = [
            // Go decodes `null` into the arguments map without error: no arguments.
            ("null", "", Some("{}")),
            ("", "", Some("{}")),
            // A JSON string holding the object.
            ("\"{\\\"a\\\":1}\"", "", Some(r#"{"a":1}"#)),
            // Not JSON: what the model wrote is delivered as content, no call.
            ("{\"a\":", "{\"a\":", None),
            // Decoded as Go decodes (harmonyparser.go json.Unmarshal): a lone surrogate escape
            // is U+FFFD; a number beyond float64 fails, where Ollama fails the request and herd
            // delivers the text like any other unparseable arguments.
            (r#"{"a":"\ud800"}"#, "", Some("{\"a\":\"\u{fffd}\"}")),
            (r#"{"a":1e400}"#, r#"{"a":1e400}"#, None),
        ];
        for (body, content, args) in cases {
            let s = format!(
                "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{body}"
            );
            every_split(&s, |chunks| {
                let r = run(&mut fresh(), chunks);
                assert_eq!(r.content, content, "{chunks:?}");
                let got: Vec<String> = calls(&r).into_iter().map(|c| c.1).collect();
                assert_eq!(got, args.into_iter().collect::<Vec<_>>(), "{chunks:?}");
            });
        }
    }

    #[test]
    fn streams_as_it_arrives() {
        // Ollama's route tests: each chunk gives what it can (partial tags held back).
        let steps: &[(&str, &str, &str)] = &[
            ("<|chan", "", ""),
            ("nel|>analy", "", ""),
            ("sis<|mess", "", ""),
            ("age|>Think", "Think", ""),
            ("ing deeply...<|end|>", "ing deeply...", ""),
            ("<|start|>assi", "", ""),
            ("stant<|message|>Result ", "", "Result "),
            ("computed<|e", "", "computed"),
            ("nd|>", "", ""),
        ];
        let mut p = fresh();
        for (i, (chunk, thinking, content)) in steps.iter().enumerate() {
            let r = p.add(chunk, i + 1 == steps.len());
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (*thinking, *content),
                "{chunk:?}"
            );
        }
    }

    #[test]
    fn max_thinks_high() {
        let level = |l: &str| Some(Think::Level(l.into()));
        assert_eq!(think(level("max")), level("high"));
        for t in [
            level("low"),
            level("medium"),
            level("high"),
            Some(Think::Bool(true)),
            None,
        ] {
            assert_eq!(think(t.clone()), t);
        }
    }

    #[test]
    fn final_only_response() {
        every_split("<|channel|>final<|message|>Hi!<|return|>", |chunks| {
            let r = run(&mut fresh(), chunks);
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("", "Hi!"));
        });
    }
}
