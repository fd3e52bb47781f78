//! The `qwen3-coder` parser (Ollama's `Qwen3CoderParser`): content with tool calls written as
//! `<tool_call><function=NAME><parameter=KEY>value</parameter>…</function></tool_call>`, argument
//! values typed from the request's tool schema ([`super::qwen3coder_call`]). No thinking. The
//! Nemotron 3 parser ([`super::nemotron`]) runs it after the thinking, and the Qwen3-VL parser
//! ([`super::qwen3vl`]) runs the same streaming with JSON calls ([`Qwen3Coder::with_format`]).
//!
//! Streaming rules, as Ollama's parser gives them for the whole output at once:
//! - content streams as it comes, except trailing whitespace and a possible partial
//!   `<tool_call>`, which wait: whitespace right before a `<tool_call>` is dropped, and so is
//!   whitespace right after a `</tool_call>`;
//! - a call is parsed once its `</tool_call>` arrives; calls get `index` 0, 1, … and an id;
//! - Ollama never flushes at the end: content's trailing whitespace (or a dangling partial tag)
//!   and a call whose `</tool_call>` never came are dropped, and herd drops them too;
//! - a call Ollama cannot decode fails Ollama's whole request; herd, as its other parsers do with
//!   unparseable calls, returns that call's text (with its tags) as content instead.

use serde_json::Value as J;

use super::qwen3coder_call::{CallFormat, CALL_CLOSE as CLOSE, CALL_OPEN as OPEN};
use super::{emit_certain, skip_space, Parsed, Parser};

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Content,
    /// Inside `<tool_call>`, waiting for `</tool_call>`.
    Call,
    /// Just after `</tool_call>`: leading whitespace is dropped.
    AfterCall,
}

pub struct Qwen3Coder {
    format: CallFormat,
    schemas: Vec<J>,
    state: State,
    buf: String,
    index: i64,
}

impl Qwen3Coder {
    /// `schemas`: the request's tools as sent (for argument types).
    pub fn new(schemas: &[J]) -> Qwen3Coder {
        Qwen3Coder::with_format(CallFormat::Xml, schemas)
    }

    /// The same streaming with calls in another family's format (Ollama's Qwen3-VL parser
    /// streams its content this way too).
    pub(crate) fn with_format(format: CallFormat, schemas: &[J]) -> Qwen3Coder {
        Qwen3Coder {
            format,
            schemas: schemas.to_vec(),
            state: State::Content,
            buf: String::new(),
            index: 0,
        }
    }

    /// Drops the whitespace the text fed next starts with (what follows a `</think>`).
    pub(crate) fn skip_space(&mut self) {
        self.state = State::AfterCall;
    }

    /// One step on `buf`; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut Parsed) -> bool {
        match self.state {
            State::Content => {
                if let Some(i) = self.buf.find(OPEN) {
                    out.content.push_str(self.buf[..i].trim_end());
                    self.buf.drain(..i + OPEN.len());
                    self.state = State::Call;
                    return true;
                }
                emit_certain(&mut self.buf, &[OPEN], &mut out.content);
                false
            }
            State::Call => {
                let Some(i) = self.buf.find(CLOSE) else {
                    return false;
                };
                let raw: String = self.buf.drain(..i + CLOSE.len()).collect();
                (self.format).emit(&raw[..i], &self.schemas, &mut self.index, out);
                self.state = State::AfterCall;
                true
            }
            State::AfterCall => {
                if !skip_space(&mut self.buf) {
                    return false;
                }
                self.state = State::Content;
                true
            }
        }
    }
}

impl Parser for Qwen3Coder {
    fn add(&mut self, chunk: &str, _done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        while self.step(&mut out) {}
        out
    }

    fn thinking_close(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::same_for_every_split;
    use serde_json::{json, Map};

    fn parse_all(s: &str, schemas: &[J]) -> Parsed {
        let r = same_for_every_split(|| Qwen3Coder::new(schemas), s);
        assert_eq!(r.thinking, "");
        r
    }

    fn args(v: J) -> Map<String, J> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn content_and_calls_with_whitespace_around_tags_dropped() {
        let s = "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n Done. ";
        let r = parse_all(s, &[]);
        assert_eq!(r.content, "Let me check.Done.");
        assert_eq!(r.tool_calls.len(), 2);
        let c = &r.tool_calls[0];
        assert_eq!((c.index, c.name.as_str()), (0, "get_weather"));
        assert_eq!(
            c.arguments,
            args(json!({"city": "Paris", "unit": "celsius"}))
        );
        let keys: Vec<&String> = c.arguments.keys().collect();
        assert_eq!(keys, ["city", "unit"], "the model's order");
        assert_eq!(
            (r.tool_calls[1].index, r.tool_calls[1].arguments.len()),
            (1, 0)
        );
        assert!(c.id.starts_with("call_") && c.id.len() == 13);
        assert_ne!(c.id, r.tool_calls[1].id);
    }

    #[test]
    fn plain_content_streams_and_loses_only_trailing_whitespace() {
        let mut p = Qwen3Coder::new(&[]);
        assert_eq!(p.add("Hello", false).content, "Hello");
        assert_eq!(p.add(" \n", false).content, "");
        assert_eq!(p.add("world <tool", false).content, " \nworld");
        assert_eq!(p.add("box>\u{3000}", false).content, " <toolbox>");
        assert_eq!(p.add("", true), Parsed::default(), "Ollama never flushes");
        let r = parse_all("  indented\u{a0}text\n\n", &[]);
        assert_eq!(r.content, "  indented\u{a0}text");
        assert_eq!(parse_all("a <tool_ca", &[]).content, "a");
    }

    #[test]
    fn unclosed_calls_are_dropped_and_undecodable_ones_are_content() {
        let r = parse_all("Hi <tool_call>\n<function=f>\n<parameter=a>\n1", &[]);
        assert_eq!((r.content.as_str(), r.tool_calls.len()), ("Hi", 0));
        for bad in [
            "",
            "just text",
            "<function=f>\n<parameter=a>\n1\n</function>",
            "<function=f>\n<parameter=a>\n1\n</parameter>",
            "</parameter><function=f></function>",
            "<parameter=a>x</parameter>",
            "<function=f>\u{1}</function>",
            "<function=f></function name=\"x\">",
            "<function name=\"a&b\"></function>",
            "<function name=\"a<b\"></function>",
            "<function name=\"&#0;\"></function>",
            "<function\u{c}name=\"f\"></function>",
        ] {
            let s = format!("x\n<tool_call>{bad}</tool_call> y");
            let r = parse_all(&s, &[]);
            assert!(r.tool_calls.is_empty(), "{bad:?}");
            assert_eq!(
                r.content,
                format!("x<tool_call>{bad}</tool_call>y"),
                "{bad:?}"
            );
        }
        // Index counts decoded calls only.
        let r = parse_all(
            "<tool_call>oops</tool_call><tool_call><function=g></function></tool_call>",
            &[],
        );
        assert_eq!(
            (r.tool_calls[0].index, r.content.as_str()),
            (0, "<tool_call>oops</tool_call>")
        );
    }

    #[test]
    fn names_and_values_decode_as_ollamas_xml_pass_does() {
        let cases: Vec<(&str, &str, J)> = vec![
            (
                "<function=exec>\n<parameter=command>\nls && echo \"a > b < c\"\n</parameter>\n</function>",
                "exec",
                json!({"command": "ls && echo \"a > b < c\""}),
            ),
            (
                "<function=\"get temp\">\n<parameter=\"loc 1\">\n\"x\"\n</parameter>\n</function>",
                "\"get temp\"",
                json!({"\"loc 1\"": "\"x\""}),
            ),
            (
                "<function=获取>\n<parameter=城市>\n\n北京\n\n</parameter></function>",
                "获取",
                json!({"城市": "\n北京\n"}),
            ),
            // Literal XML tags, entities in their attribute, CRLF line ends, text around.
            (
                "lead\r\n<function name=\"a&amp;b&#x41;\">\r\n<parameter\tname=\"k\">\r\nv\r\n</parameter>tail</function> ignored <junk",
                "a&bA",
                json!({"k": "v"}),
            ),
            // Other `<word=value>` tags inside a value are rewritten to Ollama's XML form.
            (
                "<function=f><parameter=code>\nx <y=\"1\"> z\n</parameter></function>",
                "f",
                json!({"code": "x <y name=\"&#34;1&#34;\"> z"}),
            ),
            // Nested elements are skipped with their text; duplicate keys keep the first place.
            (
                "<function=f><parameter=a>1<parameter=b>2</parameter>3</parameter><function=g>4</function><parameter=c>5</parameter><parameter=a>6</parameter></function>",
                "f",
                json!({"a": "6", "c": "5"}),
            ),
            ("<function>\n</function>", "", json!({})),
            ("<function=f><parameter>v</parameter></function>", "f", json!({"": "v"})),
            // Characters XML forbids in a rewritten name become U+FFFD.
            ("<function=a\u{1}b></function>", "a\u{FFFD}b", json!({})),
        ];
        for (raw, name, want) in cases {
            let r = parse_all(&format!("<tool_call>{raw}</tool_call>"), &[]);
            assert_eq!(r.tool_calls.len(), 1, "{raw:?}: {r:?}");
            assert_eq!(r.tool_calls[0].name, name, "{raw:?}");
            assert_eq!(r.tool_calls[0].arguments, args(want.clone()), "{raw:?}");
            assert_eq!(r.content, "", "{raw:?}");
            let keys: Vec<&String> = r.tool_calls[0].arguments.keys().collect();
            let want_keys: Vec<&String> = want.as_object().unwrap().keys().collect();
            assert_eq!(keys, want_keys, "{raw:?}");
        }
    }

    #[test]
    fn registered_as_a_named_parser() {
        use crate::prompt::parsers::{for_model, support, Options, Support};
        use crate::prompt::Template;
        assert_eq!(
            support("qwen3-coder"),
            Some(Support {
                tools: true,
                thinking: false
            })
        );
        let t = Template::parse_go("{{ .Prompt }}").unwrap();
        let o = Options {
            named: "qwen3-coder",
            ..Default::default()
        };
        let mut p = for_model(&t, &o);
        let r = p.add("ok <tool_call><function=f></function></tool_call>", true);
        assert_eq!((r.content.as_str(), r.tool_calls.len()), ("ok", 1));
    }

    #[test]
    fn values_are_typed_from_the_tool_schema() {
        let tool = json!({"type": "function", "function": {"name": "calc", "parameters": {
            "type": "object", "properties": {
                "n": {"type": "number"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
                "arr": {"type": "array"}, "obj": {"type": "object"}, "s": {"type": "string"},
                "u": {"type": ["integer", "string"]},
                "any": {"anyOf": [{"type": "boolean"}, {"type": "integer"}]},
                "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}});
        let other = json!({"type": "function", "function": {"name": "other", "parameters": {
            "type": "object", "properties": {"n": {"type": "string"}}}}});
        let schemas = [other, tool];
        let call = |k: &str, v: &str| {
            let s = format!("<tool_call><function=calc><parameter={k}>\n{v}\n</parameter></function></tool_call>");
            parse_all(&s, &schemas).tool_calls[0].arguments[k].clone()
        };
        let cases: Vec<(&str, &str, J)> = vec![
            ("n", "2.75", json!(2.75)),
            ("n", "100.0", json!(100)),
            ("n", "1.23e5", json!(123000)),
            ("n", "-0", json!(0)),
            ("n", "1_000.5", json!(1000.5)),
            ("n", "0x1.8p1", json!(3)),
            ("n", "1e400", json!("1e400")),
            // Go's int64(±Inf) and int64 of a whole value beyond int64 are its minimum (amd64).
            ("n", "Inf", json!(i64::MIN)),
            ("n", "NaN", json!("NaN")),
            ("n", "3.14.15", json!("3.14.15")),
            ("n", "1e20", json!(i64::MIN)),
            ("i", "007", json!(7)),
            ("i", "+42", json!(42)),
            ("i", "-9223372036854775808", json!(i64::MIN)),
            ("i", "9223372036854775808", json!("9223372036854775808")),
            ("i", "4.0", json!("4.0")),
            ("b", "True", json!(true)),
            ("b", "FALSE", json!(false)),
            ("b", "yes", json!(false)),
            ("s", "NULL", J::Null),
            ("s", "12", json!("12")),
            (
                "arr",
                "[1, 2.5, {\"b\": 1, \"a\": 2.0}]",
                json!([1, 2.5, {"a": 2, "b": 1}]),
            ),
            ("arr", " null", J::Null),
            ("arr", "[1,", json!("[1,")),
            ("arr", "{}", json!("{}")),
            (
                "obj",
                "{\"z\": [1], \"a\": \"x\"}",
                json!({"a": "x", "z": [1]}),
            ),
            ("obj", "[1]", json!("[1]")),
            ("u", "12", json!(12)),
            ("u", "twelve", json!("twelve")),
            ("any", "7", json!(7)),
            ("any", "TRUE", json!(true)),
            ("any", "maybe", json!("maybe")),
            ("opt", "x", json!("x")),
            ("unknown", "3", json!("3")),
        ];
        for (k, v, want) in cases {
            assert_eq!(call(k, v), want, "{k} = {v:?}");
        }
        // Exactly one newline is trimmed at each end; whole floats print as Go's do.
        let s = "<tool_call><function=calc><parameter=s>\n\n two \n\n</parameter></function></tool_call>";
        assert_eq!(
            parse_all(s, &schemas).tool_calls[0].arguments["s"],
            json!("\n two \n")
        );
        let keys: Vec<String> = match call("obj", "{\"z\": 1, \"a\": 2}") {
            J::Object(m) => m.keys().cloned().collect(),
            _ => vec![],
        };
        assert_eq!(keys, ["a", "z"], "objects come back as Go maps, sorted");
    }

    #[test]
    fn no_thinking_and_no_close_strings() {
        let p = Qwen3Coder::new(&[]);
        assert!(p.thinking_close().is_empty());
        let r = parse_all("<think>x</think>y", &[]);
        assert_eq!(
            (r.content.as_str(), r.thinking.as_str()),
            ("<think>x</think>y", "")
        );
    }
}
