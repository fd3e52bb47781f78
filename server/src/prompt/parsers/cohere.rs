//! The `cohere` parser (Ollama's `CohereParser`, Cohere North / Command A 2026 models): thinking
//! up to `<|END_THINKING|>`, then `<|START_TEXT|>…<|END_TEXT|>` content blocks and
//! `<|START_ACTION|>[…]<|END_ACTION|>` JSON call arrays, as the `cohere` renderer's prompt asks.
//!
//! Rules (Ollama's):
//! - the response starts in thinking when reasoning is on (`think` unset or on), the prompt having
//!   opened `<|START_THINKING|>`; with a non-empty assistant prefill (the prompt left its text
//!   open) it starts in content, and otherwise between blocks;
//! - thinking ends at `<|END_THINKING|>`, whitespace before it dropped;
//! - between blocks, whitespace and `<|END_OF_TURN_TOKEN|>` are skipped; `<|START_TEXT|>` (or the
//!   legacy `<|START_RESPONSE|>`) opens content and `<|START_ACTION|>` a call array; anything else
//!   is content as it stands (leading whitespace dropped);
//! - content ends at `<|END_TEXT|>`, `<|END_RESPONSE|>` or `<|END_OF_TURN_TOKEN|>`;
//! - a call array is parsed at `<|END_ACTION|>` (or at the end of the output, for truncated
//!   output) as Go's `json.Unmarshal` into `[{tool_call_id, tool_name, parameters}]` (field
//!   names in any case, `parameters` an object: top-level keys in the model's order, nested
//!   values as Go's `any`). When the array does not decode, each balanced `{…}` in it is decoded
//!   alone and the ones that fail are dropped (Go logs and skips them, returning no error, and so
//!   does herd). Tool names are not checked; calls get `index` 0, 1, … and an id (Ollama's
//!   server replaces the model's `tool_call_id` with its own);
//! - at the end, held content is delivered; held thinking (trailing whitespace or a partial tag)
//!   is dropped, as Go never delivers it.
//!
//! Go searches its whole buffer for a tag; herd takes tags in the order they appear, which is what
//! Go does on a token-by-token stream (tags are single tokens). Where the two differ for one
//! chunk of text (a start tag after other text between blocks, two different end tags in one
//! chunk) herd gives the streamed result.
//!
//! `thinking_close` is `<|END_THINKING|>` when the response starts in thinking.

use serde_json::{Map, Value as J};

use super::deepseek3::after_thinking;
use super::govalue;
use super::{partial_tag_len, thinking_close_if, Options, Parsed, Parser};
use crate::prompt::Think;

const END_THINKING: &str = "<|END_THINKING|>";
const START_TEXT: &str = "<|START_TEXT|>";
const END_TEXT: &str = "<|END_TEXT|>";
const START_ACTION: &str = "<|START_ACTION|>";
const END_ACTION: &str = "<|END_ACTION|>";
const END_OF_TURN: &str = "<|END_OF_TURN_TOKEN|>";
const START_RESPONSE: &str = "<|START_RESPONSE|>";
const END_RESPONSE: &str = "<|END_RESPONSE|>";

/// Tags that may open what follows between blocks.
const OPENERS: [&str; 4] = [START_TEXT, START_RESPONSE, START_ACTION, END_OF_TURN];
/// Tags that end content.
const CLOSERS: [&str; 3] = [END_TEXT, END_RESPONSE, END_OF_TURN];

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Thinking,
    Between,
    Content,
    Action,
}

pub struct Cohere {
    state: State,
    buf: String,
    index: i64,
    starts_thinking: bool,
}

impl Cohere {
    pub fn new(o: &Options) -> Cohere {
        let prefilled = o
            .last
            .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
        let state = if prefilled || after_thinking(o) {
            State::Content
        } else if o.think.is_none_or(Think::enabled) {
            State::Thinking
        } else {
            State::Between
        };
        Cohere {
            state,
            buf: String::new(),
            index: 0,
            starts_thinking: state == State::Thinking,
        }
    }

    /// One step; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut Parsed, done: bool) -> bool {
        match self.state {
            State::Thinking => {
                if let Some(i) = self.buf.find(END_THINKING) {
                    out.thinking.push_str(self.buf[..i].trim_end());
                    self.buf.drain(..i + END_THINKING.len());
                    self.state = State::Between;
                    return true;
                }
                let keep = partial_tag_len(&self.buf, &[END_THINKING]);
                let emit = self.buf[..self.buf.len() - keep].trim_end().len();
                out.thinking.push_str(&self.buf[..emit]);
                self.buf.drain(..emit);
                if done {
                    self.buf.clear();
                }
                false
            }
            State::Between => {
                let lead = self.buf.len() - self.buf.trim_start().len();
                let rest = &self.buf[lead..];
                if rest.is_empty() {
                    if done {
                        self.buf.clear();
                    }
                    return false;
                }
                match between(rest, done) {
                    Next::Wait => false,
                    Next::Tag(skip, tag) => {
                        self.state = match tag {
                            START_ACTION => State::Action,
                            END_OF_TURN => State::Between,
                            _ => State::Content,
                        };
                        self.buf.drain(..lead + skip + tag.len());
                        true
                    }
                    Next::Content => {
                        // Bare text (or an unknown tag) is content; its leading whitespace goes.
                        self.buf.drain(..lead);
                        self.state = State::Content;
                        true
                    }
                }
            }
            State::Content => {
                let close = CLOSERS
                    .iter()
                    .filter_map(|t| self.buf.find(t).map(|i| (i, t.len())))
                    .min();
                if let Some((i, len)) = close {
                    out.content.push_str(&self.buf[..i]);
                    self.buf.drain(..i + len);
                    self.state = State::Between;
                    return true;
                }
                let keep = if done {
                    0
                } else {
                    partial_tag_len(&self.buf, &CLOSERS)
                };
                out.content.push_str(&self.buf[..self.buf.len() - keep]);
                self.buf.drain(..self.buf.len() - keep);
                false
            }
            State::Action => {
                if let Some(i) = self.buf.find(END_ACTION) {
                    let block: String = self.buf.drain(..i + END_ACTION.len()).collect();
                    self.push_calls(&block[..i], out);
                    self.state = State::Between;
                    return true;
                }
                if done {
                    let payload = std::mem::take(&mut self.buf);
                    self.push_calls(&payload, out);
                }
                false
            }
        }
    }

    fn push_calls(&mut self, payload: &str, out: &mut Parsed) {
        for (name, arguments) in actions(payload) {
            out.push_call(&mut self.index, name, arguments);
        }
    }
}

impl Parser for Cohere {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out, done) {}
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, END_THINKING)
    }
}

/// What the text between blocks (leading whitespace skipped) starts.
enum Next {
    Wait,
    /// The tag after `skip` bytes that were a partial tag held back.
    Tag(usize, &'static str),
    Content,
}

fn is_partial(s: &str, tags: &[&str]) -> bool {
    tags.iter().any(|t| t.len() > s.len() && t.starts_with(s))
}

/// Go waits while the text could still become a tag and then searches everything it held for a
/// start tag, so on a token stream a partial tag followed by a whole start tag drops the partial
/// one (`<` then `<|START_ACTION|>`); herd holds that case back long enough to see it.
fn between(rest: &str, done: bool) -> Next {
    if let Some(tag) = OPENERS.iter().find(|t| rest.starts_with(**t)) {
        return Next::Tag(0, tag);
    }
    if !done && is_partial(rest, &OPENERS) {
        return Next::Wait;
    }
    const STARTS: [&str; 3] = [START_TEXT, START_RESPONSE, START_ACTION];
    for (k, _) in rest.char_indices().skip(1) {
        if !is_partial(&rest[..k], &OPENERS) {
            break;
        }
        let after = &rest[k..];
        if let Some(tag) = STARTS.iter().find(|t| after.starts_with(**t)) {
            return Next::Tag(k, tag);
        }
        if !done && is_partial(after, &STARTS) {
            return Next::Wait;
        }
    }
    Next::Content
}

type Call = (String, Map<String, J>);

/// The calls of an action block: the whole array when it decodes, else each balanced object
/// that does.
fn actions(payload: &str) -> Vec<Call> {
    let payload = payload.trim();
    if payload.is_empty() {
        return Vec::new();
    }
    match govalue::decode(payload) {
        Some(J::Null) => return Vec::new(),
        Some(J::Array(items)) => {
            if let Some(calls) = items.iter().map(action).collect::<Option<Vec<_>>>() {
                return calls;
            }
        }
        _ => {}
    }
    objects(payload)
        .into_iter()
        .filter_map(|o| action(&govalue::decode(o)?))
        .collect()
}

/// Go's `json.Unmarshal` of one `{tool_call_id, tool_name, parameters}`; `None` where Go returns
/// an error. `parameters` decodes through Ollama's ordered map, which takes only an object (not
/// even `null`).
fn action(v: &J) -> Option<Call> {
    let fields = match v {
        J::Null => return Some((String::new(), Map::new())),
        J::Object(o) => o,
        _ => return None,
    };
    let (mut name, mut arguments) = (String::new(), Map::new());
    for (key, value) in fields {
        if key.eq_ignore_ascii_case("tool_name") {
            match value {
                J::String(s) => name = s.clone(),
                J::Null => {}
                _ => return None,
            }
        } else if key.eq_ignore_ascii_case("tool_call_id") {
            if !(value.is_string() || value.is_null()) {
                return None;
            }
        } else if key.eq_ignore_ascii_case("parameters") {
            let J::Object(m) = value else {
                return None;
            };
            arguments = m
                .iter()
                .map(|(k, v)| (k.clone(), govalue::any(v.clone())))
                .collect();
        }
    }
    Some((name, arguments))
}

/// The balanced top-level `{…}` spans of `s`, braces inside strings ignored.
fn objects(s: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let (mut depth, mut start) = (0usize, None);
    let (mut in_str, mut esc) = (false, false);
    for (i, b) in s.bytes().enumerate() {
        if esc {
            esc = false;
        } else if in_str {
            match b {
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_str = true,
                b'{' => {
                    if depth == 0 {
                        start = Some(i);
                    }
                    depth += 1;
                }
                b'}' if depth > 0 => {
                    depth -= 1;
                    if depth == 0 {
                        if let Some(st) = start.take() {
                            found.push(&s[st..=i]);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use crate::prompt::Message;
    use serde_json::json;

    /// The one-shot result, checked against every chunking.
    fn parse(o: &Options, s: &str) -> Parsed {
        let want = run(&mut Cohere::new(o), &[s]);
        every_split(s, |chunks| {
            let got = run(&mut Cohere::new(o), chunks);
            assert_eq!(
                (&got.thinking, &got.content),
                (&want.thinking, &want.content),
                "{chunks:?}"
            );
            let strip = |p: &Parsed| {
                p.tool_calls
                    .iter()
                    .map(|c| (c.index, c.name.clone(), c.arguments.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(&got), strip(&want), "{chunks:?}");
        });
        want
    }

    fn split(o: &Options, s: &str) -> (String, String) {
        let r = parse(o, s);
        assert!(r.tool_calls.is_empty(), "{s:?}");
        (r.thinking, r.content)
    }

    #[test]
    fn thinking_then_blocks() {
        let o = Options::default();
        let cases = [
            ("plan<|END_THINKING|><|START_TEXT|>Hi!<|END_TEXT|>", "plan", "Hi!"),
            (
                " a\n b \n<|END_THINKING|>\n<|START_TEXT|> x <|END_TEXT|><|END_OF_TURN_TOKEN|>",
                " a\n b",
                " x ",
            ),
            ("t<|END_THINKING|><|START_RESPONSE|>old<|END_RESPONSE|>", "t", "old"),
            ("t<|END_THINKING|><|START_TEXT|>no end<|END_OF_TURN_TOKEN|>tail", "t", "no endtail"),
            ("t<|END_THINKING|>\n  bare text\n", "t", "bare text\n"),
            ("t<|END_THINKING|><|TOOL_PLAN|>x", "t", "<|TOOL_PLAN|>x"),
            ("t<|END_THINKING|><|END_OF_TURN_TOKEN|> <|START_TEXT|>a<|END_TEXT|> b<|START_TEXT|>c", "t", "ab<|START_TEXT|>c"),
            ("t<|END_THINKING|><|START_TEXT|>a<|END_OF_TURN_TOKEN|>b<|END_TEXT|>", "t", "ab"),
            ("t<|END_THINKING|><|STA", "t", "<|STA"),
            // A partial tag right before a start tag goes, as on Go's token stream.
            ("t<|END_THINKING|> <|<|START_TEXT|>x", "t", "x"),
            ("t<|END_THINKING|><<x", "t", "<<x"),
            ("t<|END_THINKING|><<|START_TEXT|", "t", "<<|START_TEXT|"),
            ("t<|END_THINKING|><<|END_OF_TURN_TOKEN|>", "t", "<"),
            ("t<|END_THINKING|><|START_TEXT|>cut <|END_TE", "t", "cut <|END_TE"),
            ("never closed  \n", "never closed", ""),
            ("never closed <|END_THINK", "never closed", ""),
            ("<|START_TEXT|>a<|END_THINKING|>", "<|START_TEXT|>a", ""),
            ("", "", ""),
        ];
        for (s, thinking, content) in cases {
            assert_eq!(split(&o, s), (thinking.into(), content.into()), "{s:?}");
        }
        assert_eq!(Cohere::new(&o).thinking_close(), [END_THINKING]);
    }

    #[test]
    fn think_off_and_prefill_start_elsewhere() {
        let off = Think::Bool(false);
        let o = Options {
            think: Some(&off),
            ..Default::default()
        };
        assert_eq!(
            split(&o, "<|START_TEXT|>direct<|END_TEXT|>"),
            ("".into(), "direct".into())
        );
        assert_eq!(
            split(&o, "x<|END_THINKING|>y"),
            ("".into(), "x<|END_THINKING|>y".into())
        );
        assert!(Cohere::new(&o).thinking_close().is_empty());
        let level = Think::Level("low".into());
        let o = Options {
            think: Some(&level),
            ..Default::default()
        };
        assert_eq!(split(&o, "a<|END_THINKING|>b").0, "a");

        let prefill = Message::new("assistant", "partial");
        let o = Options {
            last: Some(&prefill),
            ..Default::default()
        };
        assert_eq!(
            split(&o, " continued<|END_TEXT|>"),
            ("".into(), " continued".into())
        );
        assert!(Cohere::new(&o).thinking_close().is_empty());
        // An empty prefill does not count; a thinking-only one (herd's two-pass) does.
        let empty = Message::new("assistant", "");
        let o = Options {
            last: Some(&empty),
            ..Default::default()
        };
        assert_eq!(split(&o, "a<|END_THINKING|>b").0, "a");
        let thought = Message {
            thinking: Some("t".into()),
            ..Message::new("assistant", "")
        };
        let o = Options {
            last: Some(&thought),
            ..Default::default()
        };
        assert_eq!(
            split(&o, "{\"a\":1}<|END_TEXT|>"),
            ("".into(), "{\"a\":1}".into())
        );
    }

    fn calls(s: &str) -> Vec<(i64, String, J)> {
        parse(&Options::default(), s)
            .tool_calls
            .into_iter()
            .map(|c| (c.index, c.name, J::Object(c.arguments)))
            .collect()
    }

    fn want(list: &[(&str, J)]) -> Vec<(i64, String, J)> {
        list.iter()
            .enumerate()
            .map(|(i, (n, a))| (i as i64, n.to_string(), a.clone()))
            .collect()
    }

    #[test]
    fn action_blocks_become_calls() {
        let s = "plan<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"n\": 2.0, \"o\": {\"b\": 1, \"a\": 2}}},\n    {\"Tool_Call_Id\": null, \"TOOL_NAME\": \"get_time\", \"parameters\": {}}\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>";
        let r = parse(&Options::default(), s);
        assert_eq!((r.thinking.as_str(), r.content.as_str()), ("plan", ""));
        assert!(r.tool_calls.iter().all(|c| c.id.starts_with("call_")));
        let got = calls(s);
        assert_eq!(
            got,
            want(&[
                (
                    "get_weather",
                    json!({"city": "Paris", "n": 2, "o": {"a": 2, "b": 1}})
                ),
                ("get_time", json!({})),
            ])
        );
        // Top-level keys keep the model's order.
        let keys: Vec<String> = match &got[0].2 {
            J::Object(m) => m.keys().cloned().collect(),
            _ => unreachable!(),
        };
        assert_eq!(keys, ["city", "n", "o"]);
    }

    #[test]
    fn broken_arrays_fall_back_to_each_object() {
        let cases = [
            // An unquoted value spoils one call only.
            (
                "t<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {\"t\": 15:30}}, {\"tool_name\": \"b\", \"parameters\": {\"c\": \"x\"}}]<|END_ACTION|>",
                want(&[("b", json!({"c": "x"}))]),
            ),
            // A missing comma; braces inside strings do not split objects.
            (
                "t<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {}}{\"tool_name\": \"b\", \"parameters\": {\"x\": \"{not \\\"json}\"}}]<|END_ACTION|>",
                want(&[("a", json!({})), ("b", json!({"x": "{not \"json}"}))]),
            ),
            // Null parameters, a numeric name or a non-object fail their object.
            (
                "t<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": null}, {\"tool_name\": 1}, 3, {\"tool_name\": \"c\"}]<|END_ACTION|>",
                want(&[("c", json!({}))]),
            ),
            ("t<|END_THINKING|><|START_ACTION|>[!!!]<|END_ACTION|>", vec![]),
            ("t<|END_THINKING|><|START_ACTION|>null<|END_ACTION|>", vec![]),
            ("t<|END_THINKING|><|START_ACTION|>  <|END_ACTION|>", vec![]),
            // A null element is an empty call, as Go decodes it.
            ("t<|END_THINKING|><|START_ACTION|>[null]<|END_ACTION|>", want(&[("", json!({}))])),
            // Truncated output: what is there is parsed at the end.
            (
                "t<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {\"k\": [1, 2]}}, {\"tool_na",
                want(&[("a", json!({"k": [1, 2]}))]),
            ),
        ];
        for (s, w) in cases {
            assert_eq!(calls(s), w, "{s:?}");
        }
    }

    #[test]
    fn content_streams_before_the_end() {
        let mut p = Cohere::new(&Options::default());
        p.add("x<|END_THINKING|>", false);
        assert_eq!(p.add("Just plain", false).content, "Just plain");
        assert_eq!(p.add(" text<|END_", false).content, " text");
        assert_eq!(p.add("TEXT|>", true).content, "");
        let mut p = Cohere::new(&Options::default());
        assert_eq!(p.add("a  ", false).thinking, "a");
        assert_eq!(p.add("<|END", false).thinking, "");
        assert_eq!(p.add("b", false).thinking, "  <|ENDb");
    }
}
