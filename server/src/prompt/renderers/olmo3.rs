//! Olmo 3 prompts (Ollama's `Olmo3Renderer` and `Olmo3ThinkRenderer`), serving the renderer
//! names `olmo3`, `olmo3.1` (the instruct models; `olmo3.1` only changes the default system
//! message), `olmo3-think` (Olmo-3-7B-Think and Olmo-3.1-32B-Think) and `olmo3-32b-think`.
//!
//! Instruct: ChatML with the tools as a `<functions>` JSON list (Go's `json.Marshal` of the
//! tools with a space after every `:` and `,`) in the system message; assistant tool calls as
//! `<function_calls>name(key=json, …)</function_calls>` with the arguments sorted by key; tool
//! results under the `environment` role; only the first system message counts, other roles are
//! dropped. A final assistant message with content and no calls is a prefill: left open, no
//! generation prompt.
//!
//! Think: no tools at all (tool messages are dropped), every assistant turn closed, and the
//! prompt always ends by opening `<think>`.

use serde_json::Value as J;

use super::{json, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think};

const OLMO3_SYSTEM: &str = "You are a helpful function-calling AI assistant. ";
const OLMO31_SYSTEM: &str = "You are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is December 2024, and your model weights are available at https://huggingface.co/allenai. ";
const NO_FUNCTIONS: &str = "You do not currently have access to any functions. ";
const WITH_FUNCTIONS: &str = "You are provided with function signatures within <functions></functions> XML tags. You may call one or more functions to assist with the user query. Output any function calls within <function_calls></function_calls> XML tags. Do not make assumptions about what values to plug into functions.";

const THINK_FUNCTIONS_SUFFIX: &str =
    " You do not currently have access to any functions. <functions></functions>";
const THINK_32B_SYSTEM: &str = "You are a helpful AI assistant.";
const THINK_31_SYSTEM: &str = "You are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is December 2024, and your model weights are available at https://huggingface.co/allenai.";

/// `olmo3` (`extended: false`) and `olmo3.1` (`extended: true`).
pub struct Olmo3 {
    pub extended: bool,
}

/// The first system message, and every other message that is not a system message.
fn split_system(messages: &[Message]) -> (Option<&Message>, Vec<&Message>) {
    let system = messages.iter().find(|m| m.role == "system");
    let rest = messages.iter().filter(|m| m.role != "system").collect();
    (system, rest)
}

/// `<functions>[…]</functions>` as Ollama's `marshalWithSpaces(tools)` prints them.
fn functions(tools: &[J]) -> String {
    let list = J::Array(tools.iter().map(json::tool).collect());
    format!(
        "<functions>{}</functions>",
        json::with_spaces(&json::go(&list))
    )
}

impl Renderer for Olmo3 {
    fn render(&self, messages: &[Message], tools: &[J], _think: Option<&Think>) -> Result<String> {
        let (system, rest) = split_system(messages);
        let mut out = String::from("<|im_start|>system\n");
        match system {
            Some(s) => {
                out.push_str(&s.content);
                if !tools.is_empty() {
                    out.push_str(&functions(tools));
                }
            }
            None => {
                out.push_str(if self.extended {
                    OLMO31_SYSTEM
                } else {
                    OLMO3_SYSTEM
                });
                if tools.is_empty() {
                    out.push_str(NO_FUNCTIONS);
                    out.push_str("<functions></functions>");
                } else {
                    out.push_str(WITH_FUNCTIONS);
                    out.push_str(&functions(tools));
                }
            }
        }
        out.push_str("<|im_end|>\n");

        for (i, m) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            match m.role.as_str() {
                "user" => {
                    out.push_str("<|im_start|>user\n");
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
                "assistant" => {
                    out.push_str("<|im_start|>assistant\n");
                    out.push_str(&m.content);
                    if !m.tool_calls.is_empty() {
                        let calls: Vec<String> = m
                            .tool_calls
                            .iter()
                            .map(|c| {
                                let mut keys: Vec<&String> = c.arguments.keys().collect();
                                keys.sort();
                                let args: Vec<String> = keys
                                    .iter()
                                    .map(|k| {
                                        format!("{k}={}", json::go(&json::any(&c.arguments[*k])))
                                    })
                                    .collect();
                                format!("{}({})", c.name, args.join(", "))
                            })
                            .collect();
                        out.push_str("<function_calls>");
                        out.push_str(&calls.join("\n"));
                        out.push_str("</function_calls>");
                    }
                    if !last || !m.tool_calls.is_empty() {
                        out.push_str("<|im_end|>\n");
                    }
                }
                "tool" => {
                    out.push_str("<|im_start|>environment\n");
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
                _ => {}
            }
        }

        let prefill = rest.last().is_some_and(|m| {
            m.role == "assistant" && m.tool_calls.is_empty() && !m.content.is_empty()
        });
        if !prefill {
            out.push_str("<|im_start|>assistant\n");
        }
        Ok(out)
    }
}

/// `olmo3-think` (`large_32b: false`) and `olmo3-32b-think` (`large_32b: true`).
pub struct Olmo3Think {
    pub large_32b: bool,
}

impl Renderer for Olmo3Think {
    fn render(&self, messages: &[Message], _tools: &[J], _think: Option<&Think>) -> Result<String> {
        let (system, rest) = split_system(messages);
        let mut out = String::from("<|im_start|>system\n");
        match system {
            Some(s) => {
                out.push_str(&s.content);
                out.push_str(THINK_FUNCTIONS_SUFFIX);
            }
            None if self.large_32b => out.push_str(THINK_32B_SYSTEM),
            None => out.push_str(THINK_31_SYSTEM),
        }
        out.push_str("<|im_end|>\n");
        for m in rest {
            if matches!(m.role.as_str(), "user" | "assistant") {
                out.push_str(&format!(
                    "<|im_start|>{}\n{}<|im_end|>\n",
                    m.role, m.content
                ));
            }
        }
        out.push_str("<|im_start|>assistant\n<think>");
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::testutil::{call, m};
    use serde_json::json;

    fn weather() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "description": "Get <weather>",
            "parameters": {"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string", "description": "City"}}}}})
    }

    const TOOLS_JSON: &str = r#"<functions>[{"type": "function", "function": {"name": "get_weather", "description": "Get \u003cweather\u003e", "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "description": "City"}}}}}]</functions>"#;

    #[test]
    fn instruct_renders_as_ollama() {
        let with_calls = Message {
            tool_calls: vec![
                call("get_weather", json!({"unit": "c", "city": "Paris & Rome"})),
                call("now", json!({})),
            ],
            ..m("assistant", "Checking.")
        };
        type Case = (&'static str, bool, Vec<Message>, Vec<J>, String);
        let cases: Vec<Case> = vec![
            (
                "default system, no tools",
                false,
                vec![m("user", "Hi")],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "olmo3.1 default system with tools",
                true,
                vec![m("user", "Hi")],
                vec![weather()],
                format!("<|im_start|>system\n{OLMO31_SYSTEM}{WITH_FUNCTIONS}{TOOLS_JSON}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "custom system: first only, tools appended, no preamble",
                false,
                vec![m("system", "Be brief."), m("user", "Hi"), m("system", "ignored")],
                vec![weather()],
                format!("<|im_start|>system\nBe brief.{TOOLS_JSON}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "custom system without tools",
                true,
                vec![m("system", "Sys"), m("user", "Hi")],
                vec![],
                "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n".into(),
            ),
            (
                "tool calls sorted by key, tool results as environment, other roles dropped",
                false,
                vec![m("user", "Weather?"), with_calls.clone(), m("tool", "12C"), m("developer", "x")],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<function_calls>get_weather(city=\"Paris \\u0026 Rome\", unit=\"c\")\nnow()</function_calls><|im_end|>\n<|im_start|>environment\n12C<|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "last assistant with calls is closed and prompted",
                false,
                vec![m("user", "Weather?"), with_calls],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<function_calls>get_weather(city=\"Paris \\u0026 Rome\", unit=\"c\")\nnow()</function_calls><|im_end|>\n<|im_start|>assistant\n"),
            ),
            (
                "prefill stays open",
                false,
                vec![m("user", "Hi"), m("assistant", "Hello"), m("user", "Again"), m("assistant", "The")],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\nThe"),
            ),
            (
                "empty last assistant: left open and prompted again",
                false,
                vec![m("user", "Hi"), m("assistant", "")],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|im_start|>assistant\n"),
            ),
            (
                "no messages",
                false,
                vec![],
                vec![],
                format!("<|im_start|>system\n{OLMO3_SYSTEM}{NO_FUNCTIONS}<functions></functions><|im_end|>\n<|im_start|>assistant\n"),
            ),
        ];
        for (name, extended, msgs, tools, want) in cases {
            let got = Olmo3 { extended }.render(&msgs, &tools, None).unwrap();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn nested_argument_values_print_as_go_json() {
        let msgs = vec![Message {
            tool_calls: vec![call(
                "f",
                json!({"b": {"z": 1, "a": [1.5, null, true]}, "a": 2}),
            )],
            ..m("assistant", "")
        }];
        let got = Olmo3 { extended: false }.render(&msgs, &[], None).unwrap();
        assert!(
            got.ends_with("<|im_start|>assistant\n<function_calls>f(a=2, b={\"a\":[1.5,null,true],\"z\":1})</function_calls><|im_end|>\n<|im_start|>assistant\n"),
            "{got}"
        );
    }

    #[test]
    fn think_variants_render_as_ollama() {
        let cases = [
            (
                false,
                vec![m("user", "Hi")],
                format!("<|im_start|>system\n{THINK_31_SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>"),
            ),
            (
                true,
                vec![m("user", "Hi")],
                format!("<|im_start|>system\n{THINK_32B_SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>"),
            ),
            (
                true,
                vec![
                    m("system", "Sys"),
                    m("user", "Q"),
                    Message {
                        thinking: Some("hidden".into()),
                        tool_calls: vec![call("f", json!({}))],
                        ..m("assistant", "A")
                    },
                    m("tool", "dropped"),
                    m("system", "dropped too"),
                    m("assistant", ""),
                ],
                format!("<|im_start|>system\nSys{THINK_FUNCTIONS_SUFFIX}<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n<think>"),
            ),
        ];
        for (large_32b, msgs, want) in cases {
            let got = Olmo3Think { large_32b }
                .render(&msgs, &[weather()], Some(&Think::Bool(false)))
                .unwrap();
            assert_eq!(got, want);
        }
        assert_eq!(Olmo3Think { large_32b: false }.leading_bos(), "");
    }
}
