//! Olmo 3 output (Ollama's `Olmo3Parser` and `Olmo3ThinkParser`), serving the parser names
//! `olmo3` (tools, no thinking) and `olmo3-think` (thinking, no tools).
//!
//! `olmo3`: content, with tool calls inside `<function_calls>…</function_calls>`, one Python-ish
//! call per line: `name(key=value, …)` where a value is a quoted string (`\\ \" \' \n \t \r`
//! unescaped), `true`/`True`, `false`/`False`, `null`/`None`/`nil`, an integer, a float, a
//! `[…]` list or a `{key: value}` object of the same, and anything else a bare string. A block
//! that does not parse is dropped, as Ollama drops it (it only logs); so is a block the response
//! never closes. After a block the response is content again.
//!
//! `olmo3-think`: the prompt opens `<think>`, so the response is thinking up to `</think>`
//! (trailing whitespace trimmed, and whitespace after the tag), then content. A prefill with
//! content starts in content. Thinking still open when the response ends loses its trailing
//! whitespace and any partial `</think>`, as in Ollama.

use std::collections::BTreeMap;

use serde_json::{Map, Value as J};

use super::{
    emit_certain, govalue, partial_tag_len, skip_space, thinking_close_if, Parsed, Parser,
};

const CALLS_OPEN: &str = "<function_calls>";
const CALLS_CLOSE: &str = "</function_calls>";
const THINK_CLOSE: &str = "</think>";

/// `olmo3`.
pub struct Olmo3 {
    in_calls: bool,
    buf: String,
    index: i64,
}

impl Olmo3 {
    pub fn new() -> Olmo3 {
        Olmo3 {
            in_calls: false,
            buf: String::new(),
            index: 0,
        }
    }
}

impl Default for Olmo3 {
    fn default() -> Self {
        Olmo3::new()
    }
}

impl Parser for Olmo3 {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        loop {
            if self.in_calls {
                let Some(i) = self.buf.find(CALLS_CLOSE) else {
                    break;
                };
                if let Some(calls) = parse_calls(&self.buf[..i]) {
                    for (name, arguments) in calls {
                        out.push_call(&mut self.index, name, arguments);
                    }
                }
                self.buf.drain(..i + CALLS_CLOSE.len());
                self.in_calls = false;
            } else if let Some(i) = self.buf.find(CALLS_OPEN) {
                out.content.push_str(&self.buf[..i]);
                self.buf.drain(..i + CALLS_OPEN.len());
                self.in_calls = true;
            } else {
                let keep = partial_tag_len(&self.buf, &[CALLS_OPEN]);
                out.content.push_str(&self.buf[..self.buf.len() - keep]);
                self.buf.drain(..self.buf.len() - keep);
                break;
            }
        }
        if done {
            // A partial tag is content after all; an unclosed block is dropped.
            let rest = std::mem::take(&mut self.buf);
            if !self.in_calls {
                out.content.push_str(&rest);
            }
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The calls of one block, one per non-blank line; `None` when any line fails.
fn parse_calls(block: &str) -> Option<Vec<(String, Map<String, J>)>> {
    block
        .trim()
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(parse_call)
        .collect()
}

/// `name(args)`: a name of word characters, the arguments up to the line's last `)`.
fn parse_call(line: &str) -> Option<(String, Map<String, J>)> {
    let name_len = line
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    let rest = &line[name_len..];
    if name_len == 0 || !rest.starts_with('(') || !rest.ends_with(')') || rest.len() < 2 {
        return None;
    }
    let mut args = Map::new();
    for part in split_top_level(rest[1..rest.len() - 1].trim()) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (key, value) = part.split_once('=')?;
        args.insert(key.trim().to_string(), parse_value(value)?);
    }
    Some((line[..name_len].to_string(), args))
}

/// Splits at commas outside quotes and brackets (Ollama's `splitArguments`: a trailing empty
/// part is not kept).
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let (mut quote, mut escaped) = (None::<u8>, false);
    for (i, c) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if let Some(q) = quote {
            if c == b'\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else {
            match c {
                b'"' | b'\'' => quote = Some(c),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
    }
    if start < s.len() {
        parts.push(&s[start..]);
    }
    parts
}

fn quoted(s: &str) -> bool {
    (s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\''))
}

/// One value; `None` where Ollama fails (a bad object entry, a lone quote character).
fn parse_value(s: &str) -> Option<J> {
    let s = s.trim();
    if quoted(s) {
        // A lone `"` passes the quote test and crashes Ollama's slicing; here it fails the call.
        return (s.len() >= 2).then(|| J::String(unescape(&s[1..s.len() - 1])));
    }
    match s {
        "true" | "True" => return Some(J::Bool(true)),
        "false" | "False" => return Some(J::Bool(false)),
        "null" | "None" | "nil" => return Some(J::Null),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(J::from(i));
    }
    if let Some(f) = govalue::parse_finite(s) {
        return Some(govalue::float(f));
    }
    if s.starts_with('[') && s.ends_with(']') {
        let inner = s[1..s.len() - 1].trim();
        if inner.is_empty() {
            return Some(J::Array(Vec::new()));
        }
        return split_top_level(inner)
            .into_iter()
            .map(parse_value)
            .collect::<Option<Vec<_>>>()
            .map(J::Array);
    }
    if s.starts_with('{') && s.ends_with('}') {
        // A Go map: keys end up sorted.
        let mut obj = BTreeMap::new();
        for part in split_top_level(s[1..s.len() - 1].trim()) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (key, value) = part.split_once(':')?;
            let mut key = key.trim();
            if quoted(key) {
                if key.len() < 2 {
                    return None;
                }
                key = &key[1..key.len() - 1];
            }
            obj.insert(key.to_string(), parse_value(value)?);
        }
        return Some(J::Object(obj.into_iter().collect()));
    }
    Some(J::String(s.to_string()))
}

/// Ollama's `unescapeString`, placeholder and all (a NUL in the text becomes a backslash).
fn unescape(s: &str) -> String {
    s.replace("\\\\", "\0")
        .replace("\\\"", "\"")
        .replace("\\'", "'")
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\r", "\r")
        .replace('\0', "\\")
}

/// `olmo3-think`.
pub struct Olmo3Think {
    state: ThinkState,
    buf: String,
    starts_thinking: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum ThinkState {
    Thinking,
    /// After `</think>`: whitespace is dropped until content starts.
    AfterClose,
    Content,
}

impl Olmo3Think {
    /// `prefill`: the response continues an assistant message that has content.
    pub fn new(prefill: bool) -> Olmo3Think {
        Olmo3Think {
            state: if prefill {
                ThinkState::Content
            } else {
                ThinkState::Thinking
            },
            buf: String::new(),
            starts_thinking: !prefill,
        }
    }
}

impl Parser for Olmo3Think {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        loop {
            match self.state {
                ThinkState::Thinking => {
                    if let Some(i) = self.buf.find(THINK_CLOSE) {
                        out.thinking.push_str(self.buf[..i].trim_end());
                        self.buf.drain(..i + THINK_CLOSE.len());
                        self.state = ThinkState::AfterClose;
                        continue;
                    }
                    // Hold back a partial tag and the whitespace before it.
                    emit_certain(&mut self.buf, &[THINK_CLOSE], &mut out.thinking);
                    if done {
                        self.buf.clear();
                    }
                    break;
                }
                ThinkState::AfterClose => {
                    if !skip_space(&mut self.buf) {
                        break;
                    }
                    self.state = ThinkState::Content;
                }
                ThinkState::Content => {
                    out.content.push_str(&std::mem::take(&mut self.buf));
                    break;
                }
            }
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        thinking_close_if(self.starts_thinking, THINK_CLOSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use serde_json::json;

    fn args(v: J) -> Map<String, J> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn calls_between_content_under_every_split() {
        let s = "Let me check.<function_calls>get_weather(city=\"Paris\", unit='c')\nadd(a=1, b=2.5)</function_calls> Done.<function_calls>now()</function_calls>";
        every_split(s, |chunks| {
            let r = run(&mut Olmo3::new(), chunks);
            assert_eq!(r.content, "Let me check. Done.", "{chunks:?}");
            let got: Vec<(&str, i64, &Map<String, J>)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.index, &c.arguments))
                .collect();
            assert_eq!(
                got,
                [
                    (
                        "get_weather",
                        0,
                        &args(json!({"city": "Paris", "unit": "c"}))
                    ),
                    ("add", 1, &args(json!({"a": 1, "b": 2.5}))),
                    ("now", 2, &Map::new()),
                ],
                "{chunks:?}"
            );
            assert!(r
                .tool_calls
                .iter()
                .all(|c| c.id.starts_with("call_") && c.id.len() == 13));
        });
    }

    #[test]
    fn failed_and_unclosed_blocks_are_dropped_partial_tags_are_content() {
        for (s, content) in [
            ("a<function_calls>not a call</function_calls>b", "ab"),
            ("a<function_calls>f(x)</function_calls>b", "ab"),
            ("a<function_calls>f(x=\")</function_calls>b", "ab"),
            ("a<function_calls>f(x=1)", "a"),
            ("a <function_ca", "a <function_ca"),
            ("</function_calls>x", "</function_calls>x"),
        ] {
            every_split(s, |chunks| {
                let r = run(&mut Olmo3::new(), chunks);
                assert_eq!(r.content, content, "{chunks:?}");
                assert!(r.tool_calls.is_empty());
            });
        }
        assert!(Olmo3::new().thinking_close().is_empty());
    }

    #[test]
    fn values_parse_as_ollama() {
        let line = r#"f(s="a\"b\\n\n", t='it\'s', yes=True, no=false, n=None, z=nil, i=-42, big=9223372036854775808, f=1e3, inf=inf, arr=[1, 'x', [true]], obj={"b": 1, a: 'two', 'c': {}}, empty=[], bare=hello world, eq=a=b, nested=g(1, 2))"#;
        let (name, got) = parse_call(line).unwrap();
        assert_eq!(name, "f");
        assert_eq!(
            J::Object(got),
            json!({"s": "a\"b\\n\n", "t": "it's", "yes": true, "no": false, "n": null, "z": null,
                "i": -42, "big": 9223372036854776000_u64, "f": 1000, "inf": "inf",
                "arr": [1, "x", [true]], "obj": {"a": "two", "b": 1, "c": {}}, "empty": [],
                "bare": "hello world", "eq": "a=b", "nested": "g(1, 2)"})
        );
        let keys: Vec<String> = parse_call("f(z=1, a=2, z=3)")
            .unwrap()
            .1
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["z", "a"], "a repeated key keeps its first place");
        for bad in [
            "f",
            "f(",
            "(x=1)",
            "f x(1)",
            "f(x)",
            "f(a={b})",
            "f(a=')",
            "f(a={\":1})",
        ] {
            assert!(parse_call(bad).is_none(), "{bad}");
        }
        assert_eq!(parse_call("f( )").unwrap().1, Map::new());
        assert_eq!(parse_call("f(a=[1,,2])").unwrap().1["a"], json!([1, "", 2]));
    }

    #[test]
    fn think_splits_at_close_under_every_split() {
        every_split("I should greet.  \n</think>\n\n Hello there ", |chunks| {
            let r = run(&mut Olmo3Think::new(false), chunks);
            assert_eq!(r.thinking, "I should greet.", "{chunks:?}");
            assert_eq!(r.content, "Hello there ", "{chunks:?}");
        });
        every_split(" still thinking </thi", |chunks| {
            let r = run(&mut Olmo3Think::new(false), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (" still thinking", "")
            );
        });
        every_split("a </thinking> b</think>c", |chunks| {
            let r = run(&mut Olmo3Think::new(false), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                ("a </thinking> b", "c")
            );
        });
    }

    #[test]
    fn think_prefill_is_content_and_names_no_close() {
        let mut p = Olmo3Think::new(true);
        assert!(p.thinking_close().is_empty());
        let r = run(&mut p, &["more</think> text"]);
        assert_eq!(
            (r.thinking.as_str(), r.content.as_str()),
            ("", "more</think> text")
        );
        assert_eq!(Olmo3Think::new(false).thinking_close(), ["</think>"]);
    }

    #[test]
    fn registered_names() {
        use crate::prompt::parsers::{for_model, support, Options, Support};
        use crate::prompt::{Message, Template};
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        assert_eq!(
            support("olmo3"),
            Some(Support {
                tools: true,
                thinking: false
            })
        );
        assert_eq!(
            support("olmo3-think"),
            Some(Support {
                tools: false,
                thinking: true
            })
        );
        let o = Options {
            named: "olmo3",
            ..Default::default()
        };
        let r = run(
            for_model(&t, &o).as_mut(),
            &["x<function_calls>f(a=1)</function_calls>"],
        );
        assert_eq!((r.content.as_str(), r.tool_calls.len()), ("x", 1));
        let o = Options {
            named: "olmo3-think",
            ..Default::default()
        };
        assert_eq!(for_model(&t, &o).thinking_close(), ["</think>"]);
        let prefill = Message::new("assistant", "So");
        let o = Options {
            named: "olmo3-think",
            last: Some(&prefill),
            ..Default::default()
        };
        assert!(for_model(&t, &o).thinking_close().is_empty());
    }
}
