//! Ministral output (Ollama's `MinistralParser` without thinking support), serving the parser
//! name `ministral` (tools).
//!
//! The response starts in content. `[THINK]…[/THINK]` still splits out thinking wherever it
//! appears (untrimmed; whitespace after the closing tag is dropped), and
//! `[TOOL_CALLS]name[ARGS]{json}` is a tool call whose arguments end where the JSON value
//! closes. Content before either tag loses its trailing whitespace. As in Ollama, content's
//! trailing whitespace and a partial tag at the very end are never delivered, nor is a call the
//! response leaves unfinished; tags are taken in the order they appear.
//!
//! A call naming a tool the request does not have, or whose arguments are not a JSON object,
//! fails the whole request in Ollama; herd keeps its text as content instead (as herd's other
//! tool parsers do).

use serde_json::{Map, Value as J};

use super::{emit_certain, govalue, partial_tag_len, skip_space, Parsed, Parser};

const TOOL_CALLS: &str = "[TOOL_CALLS]";
const THINK: &str = "[THINK]";
const THINK_END: &str = "[/THINK]";
const ARGS: &str = "[ARGS]";

#[derive(Clone, Copy, PartialEq)]
enum State {
    Content,
    Thinking,
    /// After `[/THINK]`: whitespace dropped.
    AfterThinking,
    Name,
    Args,
}

pub struct Ministral {
    tools: Vec<String>,
    state: State,
    buf: String,
    name: String,
    index: i64,
}

impl Ministral {
    pub fn new(tools: &[String]) -> Ministral {
        Ministral {
            tools: tools.to_vec(),
            state: State::Content,
            buf: String::new(),
            name: String::new(),
            index: 0,
        }
    }

    fn step(&mut self, out: &mut Parsed) -> bool {
        match self.state {
            State::Content => {
                let tag = [(TOOL_CALLS, State::Name), (THINK, State::Thinking)]
                    .into_iter()
                    .filter_map(|(t, s)| self.buf.find(t).map(|i| (i, t, s)))
                    .min_by_key(|(i, ..)| *i);
                let Some((i, tag, next)) = tag else {
                    emit_certain(&mut self.buf, &[TOOL_CALLS, THINK], &mut out.content);
                    return false;
                };
                out.content.push_str(self.buf[..i].trim_end());
                self.buf.drain(..i + tag.len());
                self.state = next;
            }
            State::Thinking => {
                let Some(i) = self.buf.find(THINK_END) else {
                    let emit = self.buf.len() - partial_tag_len(&self.buf, &[THINK_END]);
                    out.thinking.push_str(&self.buf[..emit]);
                    self.buf.drain(..emit);
                    return false;
                };
                out.thinking.push_str(&self.buf[..i]);
                self.buf.drain(..i + THINK_END.len());
                self.state = State::AfterThinking;
            }
            State::AfterThinking => {
                if !skip_space(&mut self.buf) {
                    return false;
                }
                self.state = State::Content;
            }
            State::Name => {
                let Some(i) = self.buf.find(ARGS) else {
                    return false;
                };
                self.name = self.buf[..i].to_string();
                self.buf.drain(..i + ARGS.len());
                self.state = State::Args;
            }
            State::Args => {
                let Some(end) = json_end(&self.buf) else {
                    return false;
                };
                let json: String = self.buf.drain(..=end).collect();
                let name = std::mem::take(&mut self.name);
                match govalue::decode(&json) {
                    Some(J::Object(args)) if self.tools.contains(&name) => {
                        let arguments: Map<String, J> = args
                            .into_iter()
                            .map(|(k, v)| (k, govalue::any(v)))
                            .collect();
                        out.push_call(&mut self.index, name, arguments);
                    }
                    _ => out
                        .content
                        .push_str(&format!("{TOOL_CALLS}{name}{ARGS}{json}")),
                }
                self.state = State::Content;
            }
        }
        true
    }
}

/// The byte index of the bracket closing the first JSON object or array (Ollama's
/// `findJSONEnd`: strings and escapes skipped, any `}`/`]` closes any level).
fn json_end(s: &str) -> Option<usize> {
    let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
    for (i, c) in s.char_indices() {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

impl Parser for Ministral {
    fn add(&mut self, chunk: &str, done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out) {}
        if done {
            self.buf.clear();
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
    use serde_json::json;

    fn p() -> Ministral {
        Ministral::new(&["get_weather".to_string(), "now".to_string()])
    }

    #[test]
    fn content_thinking_and_calls_under_every_split() {
        let s = "[THINK]Let me check. [/THINK]\n\nSure. \n[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"opts\": {\"z\": 1, \"a\": \"}\"}}[TOOL_CALLS]now[ARGS]{} Done \n";
        every_split(s, |chunks| {
            let r = run(&mut p(), chunks);
            assert_eq!(r.thinking, "Let me check. ", "{chunks:?}");
            assert_eq!(r.content, "Sure. Done", "{chunks:?}");
            let got: Vec<(&str, i64, J)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.index, J::Object(c.arguments.clone())))
                .collect();
            assert_eq!(
                got,
                [
                    (
                        "get_weather",
                        0,
                        json!({"city": "Paris", "opts": {"a": "}", "z": 1}})
                    ),
                    ("now", 1, json!({}))
                ],
                "{chunks:?}"
            );
            let inner = r.tool_calls[0].arguments["opts"].as_object().unwrap();
            assert_eq!(inner.keys().collect::<Vec<_>>(), ["a", "z"]);
        });
    }

    #[test]
    fn tags_apply_in_order_and_ends_are_held() {
        let cases = [
            ("a [THINK]t[/THINK]b [TOOL_CALLS]now[ARGS]{}", "t", "ab", 1),
            ("plain [THI", "", "plain", 0),
            ("x[TOOL_CALLS]now[ARGS]{\"a\": [1", "", "x", 0),
            ("x[TOOL_CALLS]no", "", "x", 0),
            ("[THINK]open [/TH", "open ", "", 0),
        ];
        for (s, thinking, content, calls) in cases {
            every_split(s, |chunks| {
                let r = run(&mut p(), chunks);
                assert_eq!(r.thinking, thinking, "{chunks:?}");
                assert_eq!(r.content, content, "{chunks:?}");
                assert_eq!(r.tool_calls.len(), calls, "{chunks:?}");
            });
        }
    }

    #[test]
    fn failing_calls_are_content() {
        for (s, content) in [
            (
                "[TOOL_CALLS]rm[ARGS]{\"x\": 1}",
                "[TOOL_CALLS]rm[ARGS]{\"x\": 1}",
            ),
            (
                "[TOOL_CALLS]now[ARGS][1, 2] ok",
                "[TOOL_CALLS]now[ARGS][1, 2] ok",
            ),
            (
                "[TOOL_CALLS]now[ARGS]{\"a\":}",
                "[TOOL_CALLS]now[ARGS]{\"a\":}",
            ),
        ] {
            let r = run(&mut p(), &[s]);
            assert!(r.tool_calls.is_empty(), "{s}");
            assert_eq!(r.content, content);
        }
        assert_eq!(
            json_end("x}{\"a\": \"\\\"}\"}"),
            None,
            "a stray closer unbalances the count"
        );
        assert_eq!(json_end("{\"é\": [\"\\\"]\"]}tail"), Some(14));
    }

    #[test]
    fn registered_without_thinking() {
        use crate::prompt::parsers::{for_model, support, Options, Support};
        use crate::prompt::Template;
        assert_eq!(
            support("ministral"),
            Some(Support {
                tools: true,
                thinking: false
            })
        );
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        let tools = vec!["now".to_string()];
        let o = Options {
            named: "ministral",
            tools: &tools,
            ..Default::default()
        };
        let mut parser = for_model(&t, &o);
        assert!(parser.thinking_close().is_empty());
        let r = run(parser.as_mut(), &["[TOOL_CALLS]now[ARGS]{}"]);
        assert_eq!(r.tool_calls.len(), 1);
    }
}
