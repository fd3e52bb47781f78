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

use super::{call_id, govalue, partial_tag_len, Parsed, Parser};
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
///
/// Ollama decodes the object into Go's `map[string]any` and copies it into the ordered
/// arguments, so every value is as Go prints it back ([`govalue::any`]: each number a float64,
/// `1.0` is `1`, past 2^53 digits are lost; nested keys sorted). The top-level keys keep the
/// model's order: Go's map iteration gives them in a random one, of which this is one.
fn parse_call(names: &[String], buf: &str, wait: bool) -> Option<(String, Args, usize)> {
    let (name, name_end) = find_tool(names, buf, wait)?;
    let (args, close) = find_arguments(name, buf)?;
    let args = args?
        .into_iter()
        .map(|(k, v)| (k, govalue::any(v)))
        .collect();
    Some((name.to_string(), args, name_end.max(close)))
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
                match govalue::decode(&buf[s..=i]) {
                    Some(Value::Object(data)) => {
                        let args = match find_object(name, &data) {
                            Some(found) => found,
                            None => Some(data),
                        };
                        return Some((args, i));
                    }
                    // Not JSON (as Go decodes it): keep looking.
                    _ => start = None,
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
        Some(Value::String(s)) => match govalue::decode(s) {
            Some(Value::Object(m)) => Some(Some(m)),
            Some(Value::Null) => Some(None),
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
#[path = "tools_tests.rs"]
mod tests;
