//! Tool calls in model content for models without a named `PARSER`, as Ollama's `tools.Parser`
//! (`tools/tools.go`) finds them. The tag comes from the template (`Template::tool_call_tag`,
//! e.g. `<tool_call>`, `[TOOL_CALLS]`, `<｜tool▁calls▁begin｜>`; `{` or `[` when the template
//! shows none), the tool names from the request.
//!
//! - Before the tag: content; a possible partial tag at the end is held back. A `{` or `[` tag
//!   counts only as the first non-blank character of the response (otherwise everything is
//!   content); other tags may follow text.
//! - After the tag, each call is: the known tool name that occurs first in the remaining text
//!   (the longest one where two start at the same byte), and the first balanced, valid JSON
//!   object in that text as its arguments, which is (in this order) its `arguments` or
//!   `parameters` when it has a `name` key (an object or a JSON string of one); its value under
//!   the tool's name; the same looked up in nested objects and arrays; else the object itself.
//!   So `{"name":"f","arguments":{…}}`, `[{…},{…}]`, `{"function":{"name":…}}`,
//!   `[TOOL_CALLS]f[ARGS]{…}`, `<function=f>{…}</function>`, `f({…})` and DeepSeek's
//!   `function<｜tool▁sep｜>f\n```json\n{…}\n```` all parse. An object with a `name` but no
//!   usable `arguments`/`parameters` is no call, and no later call is found past it.
//! - Parsing resumes after the call's name or at its arguments' closing brace, whichever is
//!   later; everything else after a non-brace tag is swallowed: no more content, even between
//!   or after calls, and a call never completed or naming no known tool leaves content "".
//! - With a `{`/`[` tag the first JSON value decides: once it balances without a call in it,
//!   the whole response is content; a value cut off at the end of the stream is content when no
//!   call was found (Ollama's `Parser.Content` at `done`), "" after a call.
//!
//! Calls get `index` (0-based, per response) and an id `call_` + 8 `[a-z0-9]`; arguments keep the
//! model's key order (Ollama's map loses it).
//!
//! Chunking: Ollama's result can depend on how the text was split into chunks; herd gives every
//! chunking what Ollama gives the whole text, except in two places where it follows Ollama fed
//! token by token (as its runner streams), which keeps herd streaming: (1) with a `{`/`[` tag
//! the decision falls when the first value balances (Ollama given the whole text would also try
//! tool names after it), (2) a tool name that is a prefix of the text's very end does not hold
//! back calls at `done` (Ollama waits for more text that never comes and drops every call).

use super::{call_id, partial_tag_len, Parsed, Parser};
use crate::prompt::ToolCall;
use serde_json::{Map, Value};

type Args = Map<String, Value>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Looking for the tag in content.
    LookingForTag,
    /// After the tag: parsing calls out of `buf`.
    Calling,
    /// Plain content from here on.
    Done,
}

pub struct ToolParser {
    tag: String,
    names: Vec<String>,
    state: State,
    /// Unparsed text; while calling, it starts at the tag (or where the last call ended).
    buf: String,
    /// Calls found so far (the next call's `index`).
    index: i64,
}

impl ToolParser {
    pub fn new(tag: &str, names: &[String]) -> ToolParser {
        ToolParser {
            tag: tag.to_string(),
            // An empty name would "occur" everywhere; no tool is called that.
            names: names.iter().filter(|n| !n.is_empty()).cloned().collect(),
            state: State::LookingForTag,
            buf: String::new(),
            index: 0,
        }
    }

    /// The bracket pair of a `{` or `[` tag.
    fn brackets(&self) -> Option<(u8, u8)> {
        match self.tag.as_str() {
            "{" => Some((b'{', b'}')),
            "[" => Some((b'[', b']')),
            _ => None,
        }
    }

    fn look_for_tag(&mut self, out: &mut Parsed, done: bool) {
        if self.brackets().is_some() {
            let t = self.buf.trim_start();
            if t.is_empty() {
                // Blank so far: content whatever comes next.
                out.content.push_str(&std::mem::take(&mut self.buf));
            } else if t.starts_with(self.tag.as_str()) {
                let lead = self.buf.len() - t.len();
                out.content.extend(self.buf.drain(..lead));
                self.state = State::Calling;
            } else {
                out.content.push_str(&std::mem::take(&mut self.buf));
                self.state = State::Done;
            }
        } else if let Some(i) = self.buf.find(self.tag.as_str()) {
            // The tag stays in the buffer, as in Ollama (tool names and braces are searched
            // from it on).
            out.content.extend(self.buf.drain(..i));
            self.state = State::Calling;
        } else {
            let keep = if done {
                0
            } else {
                partial_tag_len(&self.buf, &[&self.tag])
            };
            let emit = self.buf.len() - keep;
            out.content.extend(self.buf.drain(..emit));
        }
    }

    fn parse_calls(&mut self, out: &mut Parsed, done: bool) {
        loop {
            // With a `{`/`[` tag, calls are looked for up to where the first value balances
            // (Ollama's `done()` check after each token), then the rest is content.
            let balanced = self
                .brackets()
                .and_then(|(open, close)| balanced_end(&self.buf, open, close));
            let limit = balanced.map_or(self.buf.len(), |i| i + 1);
            let wait = !(done && limit == self.buf.len());
            match parse_call(&self.names, &self.buf[..limit], wait) {
                Some((name, arguments, end)) => {
                    out.tool_calls.push(ToolCall {
                        id: call_id(),
                        index: self.index,
                        name,
                        arguments,
                    });
                    self.index += 1;
                    self.buf.drain(..end);
                }
                None => {
                    if balanced.is_some() {
                        out.content.push_str(&std::mem::take(&mut self.buf));
                        self.state = State::Done;
                    }
                    break;
                }
            }
        }
        if done && self.state == State::Calling {
            // Ollama's `Content()` at the end: a bracket-tag response with no call is content,
            // anything else left over is dropped.
            let rest = std::mem::take(&mut self.buf);
            if self.brackets().is_some() && self.index == 0 {
                out.content.push_str(&rest);
            }
        }
    }
}

impl Parser for ToolParser {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        let mut out = Parsed::default();
        if self.state == State::Done {
            out.content.push_str(chunk);
            return out;
        }
        self.buf.push_str(chunk);
        if self.state == State::LookingForTag {
            self.look_for_tag(&mut out, done);
        }
        if self.state == State::Calling {
            self.parse_calls(&mut out, done);
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Ollama's `parseToolCall`: the name, arguments and where parsing resumes (the later of the
/// name's end and the arguments' closing brace, which stays in the buffer).
fn parse_call(names: &[String], buf: &str, wait: bool) -> Option<(String, Args, usize)> {
    let (name, name_end) = find_tool(names, buf, wait)?;
    let (args, close) = find_arguments(name, buf)?;
    Some((name.to_string(), args?, name_end.max(close)))
}

/// Ollama's `findTool`: the first-occurring known name (the longest at a tie) and its end; none
/// while (`wait`) the text ends in a proper prefix of some name, which may still grow into it.
fn find_tool<'a>(names: &'a [String], buf: &str, wait: bool) -> Option<(&'a str, usize)> {
    if buf.is_empty() {
        return None;
    }
    let b = buf.as_bytes();
    if wait {
        let longest = names.iter().map(String::len).max().unwrap_or(0);
        for i in 1..=b.len().min(longest) {
            let tail = &b[b.len() - i..];
            if names
                .iter()
                .any(|n| tail.len() < n.len() && n.as_bytes().starts_with(tail))
            {
                return None;
            }
        }
    }
    let mut best: Option<(usize, &str)> = None;
    for n in names {
        if let Some(pos) = buf.find(n.as_str()) {
            if best.is_none_or(|(p, b)| pos < p || (pos == p && n.len() > b.len())) {
                best = Some((pos, n));
            }
        }
    }
    best.map(|(pos, n)| (n, pos + n.len()))
}

/// Byte scan shared by [`find_arguments`] and [`balanced_end`]: Ollama's string and escape
/// tracking (a backslash skips the next byte, also outside strings). Calls `f(i, byte)` for each
/// byte outside strings; stops when `f` returns `Some`.
fn scan<T>(buf: &str, mut f: impl FnMut(usize, u8) -> Option<T>) -> Option<T> {
    let (mut in_string, mut escaped) = (false, false);
    for (i, &c) in buf.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
        } else if c == b'\\' {
            escaped = true;
        } else if c == b'"' {
            in_string = !in_string;
        } else if !in_string {
            if let Some(r) = f(i, c) {
                return Some(r);
            }
        }
    }
    None
}

/// Ollama's `findArguments`: the first balanced `{…}` that is a valid JSON object, with the
/// arguments it holds for `name` (`None` inside: an object with a `name` but no arguments, which
/// is no call) and the index of its closing brace.
fn find_arguments(name: &str, buf: &str) -> Option<(Option<Args>, usize)> {
    let mut start = None;
    let mut depth = 0i64;
    scan(buf, |i, c| {
        if c == b'{' {
            if depth == 0 {
                start = Some(i);
            }
            depth += 1;
        } else if c == b'}' {
            depth -= 1;
            if let (0, Some(s)) = (depth, start) {
                match serde_json::from_str::<Args>(&buf[s..=i]) {
                    Ok(data) => {
                        let args = match find_object(name, &data) {
                            Some(found) => found,
                            None => Some(data),
                        };
                        return Some((args, i));
                    }
                    // Not JSON: keep looking.
                    Err(_) => start = None,
                }
            }
            depth = depth.max(0);
        }
        None
    })
}

/// Ollama's `findObject`: `Some(args)` when `obj` (or an object nested in it) names the
/// arguments, `Some(None)` when an object has a `name` but no usable arguments.
fn find_object(name: &str, obj: &Args) -> Option<Option<Args>> {
    // A key's value as arguments: an object, or a string of JSON that decodes into one (`"null"`
    // decodes into Go's nil map).
    let find_map = |key: &str| match obj.get(key) {
        Some(Value::Object(m)) => Some(Some(m.clone())),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Some(Some(m)),
            Ok(Value::Null) => Some(None),
            _ => None,
        },
        _ => None,
    };
    if obj.contains_key("name") {
        return Some(
            find_map("arguments")
                .or_else(|| find_map("parameters"))
                .flatten(),
        );
    }
    if let Some(found) = find_map(name) {
        return Some(found);
    }
    obj.values().find_map(|v| match v {
        Value::Object(child) => find_object(name, child),
        Value::Array(items) => items.iter().find_map(|item| match item {
            Value::Object(child) => find_object(name, child),
            _ => None,
        }),
        _ => None,
    })
}

/// Ollama's `done()` for a `{`/`[` tag: the index of the first `close` that brings the bracket
/// count back to zero, if any.
fn balanced_end(buf: &str, open: u8, close: u8) -> Option<usize> {
    let mut count = 0i64;
    scan(buf, |i, c| {
        if c == open {
            count += 1;
        } else if c == close {
            count -= 1;
            if count == 0 {
                return Some(i);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use serde_json::json;

    const NAMES: &[&str] = &[
        "get_temperature",
        "get_conditions",
        "say_hello",
        "say_hello_world",
        "get_address",
        "add",
    ];

    fn parser(tag: &str) -> ToolParser {
        let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
        ToolParser::new(tag, &names)
    }

    /// Every chunking of `s` gives `content` and `calls` (name, arguments).
    fn check(tag: &str, s: &str, content: &str, calls: &[(&str, Value)]) {
        every_split(s, |chunks| {
            let r = run(&mut parser(tag), chunks);
            assert_eq!(r.content, content, "{chunks:?}");
            let got: Vec<(&str, Value)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), Value::Object(c.arguments.clone())))
                .collect();
            assert_eq!(got, calls, "{chunks:?}");
            let idx: Vec<i64> = r.tool_calls.iter().map(|c| c.index).collect();
            assert_eq!(idx, (0..calls.len() as i64).collect::<Vec<_>>());
        });
    }

    const DS: &str = "<｜tool▁calls▁begin｜>";

    #[test]
    fn tagged_json_calls_with_content_before() {
        let tc = "<tool_call>";
        check(tc, "Hello, how can I help?", "Hello, how can I help?", &[]);
        check(
            tc,
            r#"Okay, both! <tool_call>{"name": "get_temperature", "arguments": {"city": "London", "format": "fahrenheit"}}</tool_call><tool_call>{"name": "get_conditions", "arguments": "{\"location\": \"Tokyo\"}"}</tool_call>"#,
            "Okay, both! ",
            &[
                (
                    "get_temperature",
                    json!({"city": "London", "format": "fahrenheit"}),
                ),
                ("get_conditions", json!({"location": "Tokyo"})),
            ],
        );
        // Name after the arguments; `parameters`; nested `function`; keyed by the tool's name.
        check(
            tc,
            r#"<tool_call>{"arguments": {"a": "5", "b": "10"}, "name": "add"}</tool_call>"#,
            "",
            &[("add", json!({"a": "5", "b": "10"}))],
        );
        check(
            tc,
            r#"<tool_call>{"function": {"name": "add", "parameters": {"a": 1}}}"#,
            "",
            &[("add", json!({"a": 1}))],
        );
        check(
            tc,
            r#"<tool_call>{"get_address": {"location": "Rome"}}"#,
            "",
            &[("get_address", json!({"location": "Rome"}))],
        );
    }

    #[test]
    fn argument_keys_keep_the_model_order() {
        let r = run(
            &mut parser("<tool_call>"),
            &[r#"<tool_call>{"name":"add","arguments":{"b":1,"a":2}}"#],
        );
        let keys: Vec<&String> = r.tool_calls[0].arguments.keys().collect();
        assert_eq!(keys, ["b", "a"]);
    }

    #[test]
    fn other_call_formats_parse_by_name_and_first_object() {
        let ds = format!(
            "<think>Wait, I need to call a tool</think>{DS}<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_temperature\n```json\n{{\"city\": \"Tokyo\"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        );
        check(
            DS,
            &ds,
            "<think>Wait, I need to call a tool</think>",
            &[("get_temperature", json!({"city": "Tokyo"}))],
        );
        check(
            "[TOOL_CALLS]",
            r#"[TOOL_CALLS]get_temperature[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1}"#,
            "",
            &[
                ("get_temperature", json!({"city": "Paris"})),
                ("add", json!({"a": 1})),
            ],
        );
        check(
            "<function=",
            r#"Sure.<function=get_temperature>{"city": "Oslo"}</function>"#,
            "Sure.",
            &[("get_temperature", json!({"city": "Oslo"}))],
        );
        check(
            "<tool_call>",
            r#"<tool_call>get_temperature({"location": "San Francisco, CA"})</tool_call>"#,
            "",
            &[("get_temperature", json!({"location": "San Francisco, CA"}))],
        );
        // Braces and quotes inside strings do not end the object.
        check(
            "<tool_call>",
            r#"<tool_call>{"name": "add", "arguments": {"code": "if (x) { return \"}\"; }"}}"#,
            "",
            &[("add", json!({"code": "if (x) { return \"}\"; }"}))],
        );
    }

    #[test]
    fn text_after_a_tag_is_swallowed_and_later_calls_still_found() {
        check(
            "<tool_call>",
            r#"A <tool_call>{"name":"add","arguments":{"a":1}}</tool_call> then some text <tool_call>{"name":"say_hello","arguments":{}}</tool_call> bye"#,
            "A ",
            &[("add", json!({"a": 1})), ("say_hello", json!({}))],
        );
    }

    #[test]
    fn cut_off_unknown_or_argumentless_calls_leave_no_content() {
        let tc = "<tool_call>";
        check(tc, r#"x<tool_call>{"name":"add","argu"#, "x", &[]);
        check(tc, r#"<tool_call>{"name":"rm_rf","arguments":{}}"#, "", &[]);
        check(
            tc,
            r#"<tool_call>{"name": "say_hello"}</tool_call>"#,
            "",
            &[],
        );
        // An argument-less object blocks the calls after it.
        check(
            tc,
            r#"<tool_call>{"name":"say_hello"}</tool_call><tool_call>{"name":"add","arguments":{}}"#,
            "",
            &[],
        );
        // Arguments that are not an object.
        check(tc, r#"<tool_call>{"name":"add","arguments":[1]}"#, "", &[]);
    }

    #[test]
    fn longest_name_wins_and_partial_names_wait() {
        let tc = "<tool_call>";
        check(
            tc,
            r#"<tool_call>{"name": "say_hello_world", "arguments": {}}</tool_call><tool_call>{"name": "say_hello", "arguments": {}}</tool_call>"#,
            "",
            &[("say_hello_world", json!({})), ("say_hello", json!({}))],
        );
        let mut p = parser(tc);
        let a = p.add(r#"<tool_call>{"name": "say_hello"#, false);
        assert!(a.tool_calls.is_empty() && a.content.is_empty());
        let b = p.add(r#"_world", "arguments": {}}"#, false);
        assert_eq!(b.tool_calls[0].name, "say_hello_world");
        // At the end of the stream a trailing name prefix holds nothing back.
        check(
            "[TOOL_CALLS]",
            r#"[TOOL_CALLS]add[ARGS]{"a": 1} ge"#,
            "",
            &[("add", json!({"a": 1}))],
        );
    }

    #[test]
    fn bracket_tags_only_count_first() {
        check(
            "{",
            " \n{\"name\": \"get_temperature\", \"arguments\": {\"city\": \"Tokyo\"}} trailing",
            " \n",
            &[("get_temperature", json!({"city": "Tokyo"}))],
        );
        let s = r#"Sure: {"name":"add","arguments":{}}"#;
        check("{", s, s, &[]);
        // `[` is not the `{` tag.
        let s = r#"[{"name":"add","arguments":{}}]"#;
        check("{", s, s, &[]);
        check(
            "[",
            r#"[{"name": "get_temperature", "arguments": {"city": "London"}}, {"name": "get_conditions", "arguments": {"location": "Tokyo"}}]]"#,
            "",
            &[
                ("get_temperature", json!({"city": "London"})),
                ("get_conditions", json!({"location": "Tokyo"})),
            ],
        );
        check("[", "[special delivery] ok", "[special delivery] ok", &[]);
        check(
            "{",
            "for { fmt.Println(\"hello\") }",
            "for { fmt.Println(\"hello\") }",
            &[],
        );
    }

    #[test]
    fn bracket_values_without_a_call_are_content() {
        // Unknown tool: content once the value balances.
        let s = r#"{"name": "search", "arguments": {"q": "x"}} more"#;
        check("{", s, s, &[]);
        // The first value decides, even when a call follows it.
        let s = r#"{"name": "jeff"} {"name": "add", "arguments": {}}"#;
        check("{", s, s, &[]);
        // Cut off at the end: content when no call was found ...
        let s = r#"{"name": "get_temperature", "arguments": {"#;
        check("{", s, s, &[]);
        let s = r#"[{"name": "search", "arguments": {}}"#;
        check("[", s, s, &[]);
        // ... dropped after one.
        check(
            "[",
            r#"[{"name": "add", "arguments": {}}, {"name": "get_conditions", "#,
            "",
            &[("add", json!({}))],
        );
    }

    #[test]
    fn ids_are_call_and_eight_lowercase_alphanumerics() {
        let r = run(&mut parser("{"), &[r#"{"name":"add","arguments":{}}"#]);
        let id = &r.tool_calls[0].id;
        assert_eq!(id.len(), 13);
        assert!(id.starts_with("call_"));
        assert!(id[5..]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }

    #[test]
    fn partial_tag_is_held_back_then_released() {
        let mut p = parser("<tool_call>");
        assert_eq!(p.add("a <tool", false).content, "a ");
        assert_eq!(p.add("box> b", true).content, "<toolbox> b");
    }

    #[test]
    fn find_arguments_facts() {
        let f = |s: &str| find_arguments("get_temperature", s).and_then(|(a, _)| a);
        assert_eq!(
            f(r#"{"format": "f"}}"#),
            json!({"format": "f"}).as_object().cloned()
        );
        assert_eq!(f(r#"{format: f}"#), None);
        assert_eq!(f(r#"{"a": 1"#), None);
        assert_eq!(
            f(r#"{"get_temperature": "{\"a\": 1}"}"#),
            json!({"a": 1}).as_object().cloned()
        );
        assert_eq!(
            f(r#""arguments": {"location": "Tokyo"}}</tool_call>"#),
            json!({"location": "Tokyo"}).as_object().cloned()
        );
        assert_eq!(
            f(r#"{"name": "path", "arguments": {"dir": "C:\\{App}\\"}}"#),
            json!({"dir": "C:\\{App}\\"}).as_object().cloned()
        );
        // An invalid object is skipped for the next one.
        assert_eq!(f(r#"{x} {"b": 2}"#), json!({"b": 2}).as_object().cloned());
        assert_eq!(f(r#"{"name": "x", "arguments": "null"}"#), None);
    }
}
