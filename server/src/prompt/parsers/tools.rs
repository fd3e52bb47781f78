//! Tool calls in model content, driven by the template's tool-call tag (`Template::tool_call_tag`,
//! e.g. `<tool_call>`; `{` when the template names none) and the request's tool names, as
//! Ollama's tools parser does it:
//! - text before the tag streams as content; a possible partial tag is held back;
//! - after the tag come JSON values (objects, or arrays of them) with the function `name` (or
//!   `function.name`) and `arguments`/`parameters` as an object or a JSON string;
//! - with the `{` tag only a response whose first non-blank character is `{` or `[` is tried;
//! - a value naming no known tool, or JSON that never completes, is content after all.
//!
//! Calls get `index` (0-based, per response) and an id `call_` + 8 `[a-z0-9]`; arguments keep the
//! model's key order.

use super::{call_id, partial_tag_len, Parsed, Parser};
use crate::prompt::ToolCall;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Looking for the tag in content.
    Searching,
    /// After a tag: parsing call JSON from `buf`.
    Calling,
    /// Plain content from here on.
    Content,
}

pub struct ToolParser {
    tag: String,
    names: Vec<String>,
    state: State,
    buf: String,
    /// Raw text of the current tool-call region (returned as content if it fails).
    raw: String,
    /// Whether any non-blank content was seen (the `{` tag only counts at the start).
    seen_text: bool,
    index: i64,
}

impl ToolParser {
    pub fn new(tag: &str, names: &[String]) -> ToolParser {
        ToolParser {
            tag: tag.to_string(),
            names: names.to_vec(),
            state: State::Searching,
            buf: String::new(),
            raw: String::new(),
            seen_text: false,
            index: 0,
        }
    }

    fn brace_tag(&self) -> bool {
        self.tag == "{"
    }

    /// Turn one parsed JSON value into calls; None when it names no known tool.
    fn calls(&mut self, v: Value) -> Option<Vec<ToolCall>> {
        let items = match v {
            Value::Array(a) => a,
            v => vec![v],
        };
        let mut out = Vec::new();
        for item in items {
            let obj = item.as_object()?;
            let f = obj
                .get("function")
                .and_then(Value::as_object)
                .unwrap_or(obj);
            let name = f.get("name").and_then(Value::as_str)?;
            if !self.names.iter().any(|n| n == name) {
                return None;
            }
            let args = f.get("arguments").or_else(|| f.get("parameters"));
            let arguments = match args {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(m)) => m,
                    _ => return None,
                },
                Some(_) => return None,
            };
            out.push(ToolCall {
                id: call_id(),
                index: 0,
                name: name.to_string(),
                arguments,
            });
        }
        for c in &mut out {
            c.index = self.index;
            self.index += 1;
        }
        Some(out)
    }

    fn step(&mut self, out: &mut Parsed, done: bool) {
        match self.state {
            State::Searching if self.brace_tag() => {
                let t = self.buf.trim_start();
                if t.starts_with('{') || t.starts_with('[') {
                    if self.seen_text {
                        self.state = State::Content;
                    } else {
                        let lead = self.buf.len() - t.len();
                        self.raw = self.buf.drain(..lead).collect();
                        self.state = State::Calling;
                    }
                } else if !t.is_empty() {
                    self.state = State::Content;
                } else if done {
                    out.content.push_str(&std::mem::take(&mut self.buf));
                }
            }
            State::Searching => {
                if let Some(i) = self.buf.find(self.tag.as_str()) {
                    out.content.push_str(&self.buf[..i]);
                    self.raw = self.tag.clone();
                    self.buf = self.buf[i + self.tag.len()..].to_string();
                    self.state = State::Calling;
                } else {
                    let keep = if done {
                        0
                    } else {
                        partial_tag_len(&self.buf, &[&self.tag])
                    };
                    let emit = self.buf.len() - keep;
                    out.content.push_str(&self.buf[..emit]);
                    self.buf.drain(..emit);
                }
            }
            State::Calling => self.parse_calls(out, done),
            State::Content => {
                out.content.push_str(&std::mem::take(&mut self.buf));
            }
        }
        if !out.content.trim().is_empty() {
            self.seen_text = true;
        }
    }

    /// Parse as many complete values as `buf` holds, skipping separators and repeated tags.
    fn parse_calls(&mut self, out: &mut Parsed, done: bool) {
        loop {
            let skip = self.skippable_prefix();
            self.raw.push_str(&self.buf[..skip]);
            self.buf.drain(..skip);
            if self.buf.is_empty() {
                return;
            }
            let close = closing_tag(&self.tag).unwrap_or_default();
            let maybe_tag = |t: &str| !t.is_empty() && t.starts_with(self.buf.as_str());
            if !done && (maybe_tag(&self.tag) || maybe_tag(&close)) {
                return;
            }
            let mut it = serde_json::Deserializer::from_str(&self.buf).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let used = it.byte_offset();
                    match self.calls(v) {
                        Some(calls) => {
                            out.tool_calls.extend(calls);
                            self.buf.drain(..used);
                            self.raw.clear();
                        }
                        None => return self.give_up(out),
                    }
                }
                Some(Err(e)) if e.is_eof() && !done => return,
                _ => {
                    // Not JSON here: after at least one call, the rest is content; otherwise the
                    // whole region was never a call.
                    return self.give_up(out);
                }
            }
        }
    }

    /// Whitespace, commas and (closing or repeated) tags between call values.
    fn skippable_prefix(&self) -> usize {
        let b = &self.buf;
        let mut i = 0;
        loop {
            let rest = &b[i..];
            let t = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
            i += rest.len() - t.len();
            let rest = &b[i..];
            let close = closing_tag(&self.tag);
            if !self.brace_tag() && rest.starts_with(self.tag.as_str()) {
                i += self.tag.len();
            } else if close.as_deref().is_some_and(|c| rest.starts_with(c)) {
                i += close.as_deref().map_or(0, str::len);
            } else {
                return i;
            }
        }
    }

    fn give_up(&mut self, out: &mut Parsed) {
        out.content.push_str(&std::mem::take(&mut self.raw));
        out.content.push_str(&std::mem::take(&mut self.buf));
        self.state = State::Content;
    }
}

/// `<tool_call>` → `</tool_call>`; `[TOOL_CALLS]`-style tags have no closing form.
fn closing_tag(tag: &str) -> Option<String> {
    tag.strip_prefix('<').map(|t| format!("</{t}"))
}

impl Parser for ToolParser {
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
        if done && self.state == State::Calling && !self.buf.is_empty() {
            self.give_up(&mut out);
        }
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};

    fn names() -> Vec<String> {
        vec!["get_weather".into(), "add".into()]
    }

    #[test]
    fn tagged_calls_with_content_before() {
        let s = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}</tool_call>";
        every_split(s, |chunks| {
            let r = run(&mut ToolParser::new("<tool_call>", &names()), chunks);
            assert_eq!(r.content, "Let me check.", "{chunks:?}");
            assert_eq!(r.tool_calls.len(), 2, "{chunks:?}");
            let c = &r.tool_calls[0];
            assert_eq!((c.name.as_str(), c.index), ("get_weather", 0));
            let keys: Vec<&String> = c.arguments.keys().collect();
            assert_eq!(keys, ["city", "unit"], "model key order kept");
            assert_eq!(r.tool_calls[1].index, 1);
            assert_eq!(r.tool_calls[1].arguments["b"], 2, "string arguments parsed");
        });
    }

    #[test]
    fn ids_are_call_and_eight_lowercase_alphanumerics() {
        let r = run(
            &mut ToolParser::new("{", &names()),
            &[r#"{"name":"add","parameters":{"a":1}}"#],
        );
        let id = &r.tool_calls[0].id;
        assert_eq!(id.len(), 13);
        assert!(id.starts_with("call_"));
        assert!(id[5..]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        assert_eq!(r.tool_calls[0].arguments["a"], 1, "parameters accepted");
    }

    #[test]
    fn brace_tag_only_counts_at_the_start() {
        every_split(
            r#" [{"function":{"name":"add","arguments":{}}}]"#,
            |chunks| {
                let r = run(&mut ToolParser::new("{", &names()), chunks);
                assert_eq!(r.tool_calls.len(), 1, "{chunks:?}");
                assert_eq!(r.content, "");
            },
        );
        every_split(r#"Sure: {"name":"add","arguments":{}}"#, |chunks| {
            let r = run(&mut ToolParser::new("{", &names()), chunks);
            assert!(r.tool_calls.is_empty());
            assert_eq!(r.content, r#"Sure: {"name":"add","arguments":{}}"#);
        });
    }

    #[test]
    fn brace_tag_text_that_is_not_json_is_content_once() {
        let s = " [tools:1] hello <call x>";
        every_split(s, |chunks| {
            let r = run(&mut ToolParser::new("{", &names()), chunks);
            assert!(r.tool_calls.is_empty());
            assert_eq!(r.content, s, "{chunks:?}");
        });
    }

    #[test]
    fn unknown_tools_and_broken_json_are_content() {
        let s = r#"<tool_call>{"name":"rm_rf","arguments":{}}"#;
        every_split(s, |chunks| {
            let r = run(&mut ToolParser::new("<tool_call>", &names()), chunks);
            assert!(r.tool_calls.is_empty());
            assert_eq!(r.content, s);
        });
        let s = r#"x<tool_call>{"name":"add","argu"#;
        every_split(s, |chunks| {
            let r = run(&mut ToolParser::new("<tool_call>", &names()), chunks);
            assert!(r.tool_calls.is_empty());
            assert_eq!(r.content, s, "{chunks:?}");
        });
    }

    #[test]
    fn partial_tag_is_held_back_then_released() {
        let mut p = ToolParser::new("<tool_call>", &names());
        assert_eq!(p.add("a <tool", false).content, "a ");
        assert_eq!(p.add("box> b", true).content, "<toolbox> b");
    }
}
