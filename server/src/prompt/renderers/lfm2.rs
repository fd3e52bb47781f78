//! Liquid LFM2 prompts (Ollama's `LFM2Renderer`), serving the renderer names `lfm2` and
//! `lfm2-thinking`.
//!
//! `<|startoftext|>` (the renderer's leading BOS), then ChatML. The first system message and
//! the tools (`List of tools: <|tool_list_start|>[…]<|tool_list_end|>`, each tool's function
//! object as JSON with Python's `", "`/`": "` separators and no HTML escaping) share the system
//! block. Assistant tool calls print Python-style in front of the content,
//! `<|tool_call_start|>[name(key=json,…)]<|tool_call_end|>` with sorted keys; tool results are
//! wrapped in `<|tool_response_start|>…<|tool_response_end|>`. Images become `[img-N]` tags.
//!
//! Thinking: `lfm2-thinking` writes a message's thinking back as `<think>…</think>` before its
//! calls and content; both variants drop the reasoning of assistant turns other than the last
//! one unless the thinking variant runs with `think` on. A final assistant message is a
//! prefill: left open, no generation prompt.

use serde_json::Value as J;

use super::{image_tags, json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

pub struct Lfm2 {
    pub thinking: bool,
}

const BOS: &str = "<|startoftext|>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_START: &str = "<|tool_call_start|>";
const CALL_END: &str = "<|tool_call_end|>";
const RESPONSE_START: &str = "<|tool_response_start|>";
const RESPONSE_END: &str = "<|tool_response_end|>";

/// Go's JSON encoder without HTML escaping, then a space after every `:` and `,` outside
/// strings (HF `tojson`).
fn lfm2_json(v: &J) -> String {
    json::with_spaces(&json::unescape_html(&json::go(v)))
}

/// The tool's function object, or the whole tool when it names no function, as [`lfm2_json`]
/// prints it except inside `parameters.properties`: Ollama keeps the properties in an ordered map
/// whose own `MarshalJSON` runs `json.Marshal` on each property, so there `<`, `>`, `&` stay
/// escaped even though the encoder around it does not escape.
fn tool_json(t: &J) -> String {
    let mut t = json::tool(t);
    let whole = t["function"]["name"].as_str().unwrap_or("").is_empty();
    if !whole {
        t = t["function"].take();
    }
    let params = match whole {
        true => &mut t["function"]["parameters"],
        false => &mut t["parameters"],
    };
    let props = params["properties"].take();
    // `properties` prints last in `parameters`, which prints last in the function, which prints
    // last in the tool.
    let tail = if whole { "}}}" } else { "}}" };
    let outer = json::unescape_html(&json::go(&t));
    let head = outer
        .strip_suffix(tail)
        .and_then(|h| h.strip_suffix("null"))
        .unwrap_or(&outer);
    json::with_spaces(&format!("{head}{}{tail}", json::go(&props)))
}

fn tool_calls(m: &Message) -> String {
    let calls: Vec<String> = m
        .tool_calls
        .iter()
        .map(|c| {
            let mut keys: Vec<&String> = c.arguments.keys().collect();
            keys.sort();
            let args: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}={}", lfm2_json(&json::any(&c.arguments[*k]))))
                .collect();
            format!("{}({})", c.name, args.join(","))
        })
        .collect();
    format!("{CALL_START}[{}]{CALL_END}", calls.join(","))
}

impl Renderer for Lfm2 {
    fn leading_bos(&self) -> &'static str {
        BOS
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        let mut out = String::from(BOS);
        let (mut system, start) = match messages.first() {
            Some(m) if m.role == "system" => (m.content.clone(), 1),
            _ => (String::new(), 0),
        };
        if !tools.is_empty() {
            if !system.is_empty() {
                system.push('\n');
            }
            let list: Vec<String> = tools.iter().map(tool_json).collect();
            system.push_str(&format!(
                "List of tools: <|tool_list_start|>[{}]<|tool_list_end|>",
                list.join(", ")
            ));
        }
        if !system.is_empty() {
            out.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
        }

        let keep_past_thinking = self.thinking && think.is_some_and(Think::enabled);
        let last_assistant = messages.iter().rposition(|m| m.role == "assistant");
        let mut offset: usize = messages[..start].iter().map(|m| m.images).sum();
        for (i, m) in messages.iter().enumerate().skip(start) {
            let prefill = i + 1 == messages.len() && m.role == "assistant";
            let (mut content, next) = image_tags(&m.content, m.images, offset);
            offset = next;
            let assistant = m.role == "assistant";
            if assistant && !m.tool_calls.is_empty() && !content.contains(CALL_START) {
                content = if content.trim().is_empty() {
                    tool_calls(m) + &content
                } else {
                    format!("{}\n{content}", tool_calls(m))
                };
            }
            let thinking = m.thinking.as_deref().unwrap_or("");
            if self.thinking && assistant && !thinking.is_empty() && !content.contains(THINK_CLOSE)
            {
                content = format!("{THINK_OPEN}{thinking}{THINK_CLOSE}{content}");
            }
            if assistant && !keep_past_thinking && Some(i) != last_assistant {
                if let Some(at) = content.rfind(THINK_CLOSE) {
                    content = content[at + THINK_CLOSE.len()..].trim().to_string();
                }
            }
            if m.role == "tool" && !content.contains(RESPONSE_START) {
                content = format!("{RESPONSE_START}{content}{RESPONSE_END}");
            }
            out.push_str(&format!("<|im_start|>{}\n{content}", m.role));
            if !prefill {
                out.push_str("<|im_end|>\n");
            }
        }
        if messages.last().is_none_or(|m| m.role != "assistant") {
            out.push_str("<|im_start|>assistant\n");
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::m;
    use crate::prompt::ToolCall;
    use serde_json::json;

    fn with_calls(content: &str, thinking: &str, args: J) -> Message {
        Message {
            thinking: (!thinking.is_empty()).then(|| thinking.to_string()),
            tool_calls: vec![ToolCall {
                name: "get_weather".into(),
                arguments: args.as_object().cloned().unwrap_or_default(),
                ..Default::default()
            }],
            ..m("assistant", content)
        }
    }

    fn render(thinking: bool, msgs: &[Message], tools: &[J], think: Option<Think>) -> String {
        Lfm2 { thinking }
            .render(msgs, tools, think.as_ref())
            .unwrap()
    }

    #[test]
    fn json_has_spaces_and_no_html_escaping() {
        let v = json!({"b": "x <y> & \"z\", w: \\u003c", "a": [1, 2.5], "c": "\u{2028}"});
        assert_eq!(
            lfm2_json(&json::any(&v)),
            r#"{"a": [1, 2.5], "b": "x <y> & \"z\", w: \\u003c", "c": "\u2028"}"#
        );
    }

    #[test]
    fn tools_join_the_first_system_message() {
        let tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather <now>",
            "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}});
        let nameless = json!({"type": "function", "function": {"description": "x"}});
        let list = r#"List of tools: <|tool_list_start|>[{"name": "get_weather", "description": "Weather <now>", "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}, {"type": "function", "function": {"name": "", "description": "x", "parameters": {"type": "", "properties": null}}}]<|tool_list_end|>"#;
        let cases = [
            (vec![m("system", "Sys"), m("user", "Hi")], vec![tool.clone(), nameless],
                format!("<|startoftext|><|im_start|>system\nSys\n{list}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")),
            (vec![m("user", "Hi")], vec![],
                "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n".to_string()),
            (vec![m("system", ""), m("user", "Hi"), m("system", "later")], vec![],
                "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nlater<|im_end|>\n<|im_start|>assistant\n".to_string()),
        ];
        for (msgs, tools, want) in cases {
            assert_eq!(render(false, &msgs, &tools, None), want);
        }
        assert_eq!(Lfm2 { thinking: true }.leading_bos(), BOS);
    }

    #[test]
    fn tool_properties_keep_go_html_escaping() {
        // Only the properties (an ordered map marshalled with json.Marshal) stay escaped.
        let tool = json!({"type": "function", "function": {"name": "find", "description": "a <b> & c",
            "parameters": {"type": "object", "$defs": {"d": "<x>"}, "properties": {"q&a": {"type": "string",
            "description": "<tags> & more", "items": {"e": ">"}}}}}});
        let nameless =
            json!({"function": {"parameters": {"properties": {"k": {"description": "<"}}}}});
        let want = concat!(
            r#"<|startoftext|><|im_start|>system\nList of tools: <|tool_list_start|>["#,
            r#"{"name": "find", "description": "a <b> & c", "parameters": {"type": "object", "$defs": {"d": "<x>"}, "#,
            r#""properties": {"q\u0026a": {"type": "string", "items": {"e": "\u003e"}, "description": "\u003ctags\u003e \u0026 more"}}}}, "#,
            r#"{"type": "", "function": {"name": "", "parameters": {"type": "", "properties": {"k": {"description": "\u003c"}}}}}"#,
            r#"]<|tool_list_end|><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"#,
        )
        .replace("\\n", "\n");
        assert_eq!(
            render(false, &[m("user", "Hi")], &[tool, nameless], None),
            want
        );
    }

    #[test]
    fn history_calls_results_and_thinking() {
        let msgs = vec![
            m("user", "Weather?"),
            with_calls(
                "",
                "need weather",
                json!({"unit": "c", "city": "Paris & Rome", "n": 2}),
            ),
            m("tool", "12C"),
            m("tool", "<|tool_response_start|>raw<|tool_response_end|>"),
            with_calls("It is cold.", "", json!({})),
            Message {
                thinking: Some("t3".into()),
                ..m("assistant", "<think>inline</think> Final ")
            },
            m("user", "Thanks"),
        ];
        let calls1 = r#"<|tool_call_start|>[get_weather(city="Paris & Rome",n=2,unit="c")]<|tool_call_end|>"#;
        let calls2 = "<|tool_call_start|>[get_weather()]<|tool_call_end|>";
        let body = |a1: &str, a3: &str| {
            format!("<|startoftext|><|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n{a1}<|im_end|>\n<|im_start|>tool\n<|tool_response_start|>12C<|tool_response_end|><|im_end|>\n<|im_start|>tool\n<|tool_response_start|>raw<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n{calls2}\nIt is cold.<|im_end|>\n<|im_start|>assistant\n{a3}<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n")
        };
        // Plain lfm2: thinking never written; earlier turns lose inline reasoning, the last
        // assistant turn keeps it.
        assert_eq!(
            render(false, &msgs, &[], Some(Think::Bool(true))),
            body(calls1, "<think>inline</think> Final ")
        );
        // Thinking variant, think unset: thinking written back, then stripped from all but the
        // last assistant turn.
        assert_eq!(
            render(true, &msgs, &[], None),
            body(calls1, "<think>inline</think> Final ")
        );
        // Thinking variant with think on keeps every turn's reasoning.
        assert_eq!(
            render(true, &msgs, &[], Some(Think::Level("high".into()))),
            body(
                &format!("<think>need weather</think>{calls1}"),
                "<think>inline</think> Final "
            )
        );
    }

    #[test]
    fn prefill_images_and_existing_call_markup() {
        let msgs = vec![
            Message {
                images: 1,
                ..m("system", "S")
            },
            Message {
                images: 2,
                ..m("user", "[img] and")
            },
            with_calls(
                "<|tool_call_start|>[x()]<|tool_call_end|>",
                "",
                json!({"a": 1}),
            ),
            Message {
                thinking: Some("plan".into()),
                ..m("assistant", "The")
            },
        ];
        let got = render(true, &msgs, &[], Some(Think::Bool(false)));
        assert_eq!(got, "<|startoftext|><|im_start|>system\nS<|im_end|>\n<|im_start|>user\n[img-2] [img-1] and<|im_end|>\n<|im_start|>assistant\n<|tool_call_start|>[x()]<|tool_call_end|><|im_end|>\n<|im_start|>assistant\n<think>plan</think>The");
        // A whitespace-only content keeps its whitespace after the calls.
        let got = render(
            false,
            &[with_calls(" \n", "", json!({"s": "a,b"}))],
            &[],
            None,
        );
        assert_eq!(got, "<|startoftext|><|im_start|>assistant\n<|tool_call_start|>[get_weather(s=\"a,b\")]<|tool_call_end|> \n");
    }
}
