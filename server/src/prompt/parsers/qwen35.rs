//! The Qwen 3.5 output parser (Ollama's `Qwen35Parser`, parser names `qwen3.5` and `ornith`): the
//! Qwen 3 machine ([`super::qwen3`]) with XML tool calls, as Ollama's `Qwen3CoderParser` reads
//! them after the thinking:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Thinking is on unless `think` is false, and off when the response continues an assistant
//! prefill with content. Calls are read, and their values typed by the tool's schema, by
//! [`super::qwen3coder_call`]; a call that does not decode is content (see [`super::qwen3`]).

use super::qwen3::QwenParser;
use super::qwen3coder_call::CallFormat;
use super::Options;
use crate::prompt::Think;

/// The parser for `qwen3.5` / `ornith`.
pub fn parser(o: &Options) -> QwenParser {
    let prefill = o
        .last
        .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
    let on = o.think.is_none_or(Think::enabled) && !prefill;
    QwenParser::new(CallFormat::Xml, on, o.schemas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use crate::prompt::parsers::{for_model, support, Parser, Support};
    use crate::prompt::{Message, Template};
    use serde_json::{json, Value as J};

    fn weather() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer"}, "detail": {"type": "object"}}}}})
    }

    fn named(name: &str, think: Option<Think>, last: Option<&Message>) -> Box<dyn Parser> {
        let tools = [weather()];
        let o = Options {
            think: think.as_ref(),
            last,
            named: name,
            schemas: &tools,
            ..Options::default()
        };
        for_model(&Template::parse_go("{{ .Prompt }}").unwrap(), &o)
    }

    fn calls(r: &super::super::Parsed) -> Vec<(String, i64, J)> {
        let c = r.tool_calls.iter();
        c.map(|c| (c.name.clone(), c.index, J::Object(c.arguments.clone())))
            .collect()
    }

    #[test]
    fn thinking_then_a_call_typed_by_the_schema() {
        let s = "Plan.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=detail>\n{\"b\": [1, 2.5], \"a\": null}\n</parameter>\n</function>\n</tool_call>";
        for name in ["qwen3.5", "ornith"] {
            every_split(s, |chunks| {
                let r = run(named(name, None, None).as_mut(), chunks);
                assert_eq!((r.thinking.as_str(), r.content.as_str()), ("Plan.", ""));
                let args = json!({"city": "San Francisco", "days": 3, "detail": {"a": null, "b": [1, 2.5]}});
                assert_eq!(
                    calls(&r),
                    vec![("get_weather".into(), 0, args)],
                    "{chunks:?}"
                );
            });
        }
    }

    #[test]
    fn calls_among_content_and_inside_thinking() {
        let off = Some(Think::Bool(false));
        let s = "Two: <tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=days>\nsoon\n</parameter>\n</function>\n</tool_call>\n\nthen text";
        every_split(s, |chunks| {
            let r = run(named("ornith", off.clone(), None).as_mut(), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                ("", "Two:then text")
            );
            let want = vec![
                ("get_weather".into(), 0, json!({"city": "Oslo"})),
                ("get_weather".into(), 1, json!({"days": "soon"})),
            ];
            assert_eq!(calls(&r), want, "{chunks:?}");
        });
        // A call before </think> ends the thinking; a call that does not decode is content.
        let s = "hmm <tool_call><function=f></function></tool_call>ok <tool_call>{\"name\":\"f\"}</tool_call>";
        every_split(s, |chunks| {
            let r = run(named("qwen3.5", None, None).as_mut(), chunks);
            let content = "ok<tool_call>{\"name\":\"f\"}</tool_call>";
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("hmm", content));
            assert_eq!(calls(&r), vec![("f".into(), 0, json!({}))]);
        });
    }

    #[test]
    fn thinking_unless_off_or_continuing_a_prefill() {
        let prefill = Message::new("assistant", "The answer");
        let empty = Message::new("assistant", "");
        let cases = [
            (None, None, ("a", "b")),
            (Some(Think::Level("high".into())), None, ("a", "b")),
            (Some(Think::Bool(false)), None, ("", "a</think>b")),
            (None, Some(&prefill), ("", "a</think>b")),
            (None, Some(&empty), ("a", "b")),
        ];
        for (think, last, (thinking, content)) in cases {
            let mut p = named("qwen3.5", think, last);
            let close = if thinking.is_empty() {
                vec![]
            } else {
                vec!["</think>"]
            };
            assert_eq!(p.thinking_close(), close);
            let r = run(p.as_mut(), &["a</think>b"]);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (thinking, content)
            );
        }
    }

    #[test]
    fn registered_with_ollamas_support() {
        let both = Support {
            tools: true,
            thinking: true,
        };
        for (name, want) in [
            ("qwen3.5", both),
            ("ornith", both),
            ("qwen3-thinking", both),
            (
                "qwen3",
                Support {
                    thinking: false,
                    ..both
                },
            ),
        ] {
            assert_eq!(support(name), Some(want), "{name}");
        }
    }
}
