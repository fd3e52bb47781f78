//! Gemma 4's chat format, Ollama's `Gemma4Renderer`, for the renderer names `gemma4-small`
//! (e2b/e4b) and `gemma4-large` (12b/26b/31b; the legacy `gemma4` resolves to one of them per
//! model, see [`super::resolve`]). The large size differs only in the generation prompt: with
//! thinking off it pre-fills an empty thought block (`<|channel>thought\n<channel|>`).
//!
//! Format: `<bos>`, then an optional system turn (`<|turn>system\n[<|think|>\n]SYSTEM TOOLS<turn|>\n`:
//! when the first message is system/developer, tools are given, or thinking is on), then turns
//! `<|turn>ROLE\n…<turn|>\n` (assistant → `model`). An assistant turn carries its calls
//! (`<|tool_call>call:NAME{args}<tool_call|>`) and the tool messages that follow it
//! (`<|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|>`), then its content with
//! old thinking blocks stripped; its own `thinking` is printed only after the last user message.
//! Adjacent assistant messages continue one model turn; a call without responses ends the
//! prompt at `<|tool_response>`, and answered calls let the model continue its turn (with
//! `<|channel>thought\n` pre-opened when thinking). Tool messages not following calls are
//! dropped, as in Ollama. Declarations and argument values: [`super::gemma4_tools`].

use serde_json::Value as J;

use super::gemma4_tools::{arg_value, declaration};
use super::{image_tags, Renderer};
use crate::error::Result;
use crate::prompt::{Message, Think, ToolCall};

/// The Gemma 4 renderer of one size.
pub struct Gemma4 {
    /// `gemma4-large`: an empty thought block opens the answer when thinking is off.
    empty_block_on_nothink: bool,
}

impl Gemma4 {
    pub fn small() -> Gemma4 {
        Gemma4 {
            empty_block_on_nothink: false,
        }
    }

    pub fn large() -> Gemma4 {
        Gemma4 {
            empty_block_on_nothink: true,
        }
    }
}

/// What the last rendered message ended with.
#[derive(PartialEq)]
enum Ended {
    Other,
    /// Calls without responses: the prompt stops at `<|tool_response>`.
    ToolCall,
    /// Calls with their responses: the model continues its turn.
    ToolResponse,
}

impl Renderer for Gemma4 {
    fn leading_bos(&self) -> &'static str {
        "<bos>"
    }

    fn render(&self, messages: &[Message], tools: &[J], think: Option<&Think>) -> Result<String> {
        // Gemma 4's tokenizer adds no BOS of its own; the template prints it.
        let mut out = String::from("<bos>");
        let mut images = 0;
        let (system, msgs) = match messages.first() {
            Some(m) if m.role == "system" || m.role == "developer" => {
                (Some(m.content.as_str()), &messages[1..])
            }
            _ => (None, messages),
        };
        let thinking = think.is_some_and(Think::enabled);
        if system.is_some() || !tools.is_empty() || thinking {
            out.push_str("<|turn>system\n");
            if thinking {
                out.push_str("<|think|>\n");
            }
            out.push_str(system.unwrap_or("").trim());
            for t in tools {
                out.push_str(&declaration(t));
            }
            out.push_str("<turn|>\n");
        }

        let last_user = msgs.iter().rposition(|m| m.role == "user");
        let mut ended = Ended::Other;
        let mut prev_role = "";
        for (i, m) in msgs.iter().enumerate() {
            if m.role == "tool" {
                continue;
            }
            ended = Ended::Other;
            let assistant = m.role == "assistant";
            if !(assistant && prev_role == "assistant") {
                let role = if assistant { "model" } else { m.role.as_str() };
                out.push_str(&format!("<|turn>{role}\n"));
            }
            let thought = m.thinking.as_deref().unwrap_or("");
            if assistant && !thought.is_empty() && last_user.is_none_or(|u| i > u) {
                out.push_str(&format!("<|channel>thought\n{thought}\n<channel|>"));
            }
            let mut answered = false;
            if !m.tool_calls.is_empty() {
                ended = Ended::ToolCall;
                for c in &m.tool_calls {
                    out.push_str(&call(c));
                }
                for r in msgs[i + 1..].iter().take_while(|r| r.role == "tool") {
                    let (content, next) = image_tags(&r.content, r.images, images);
                    images = next;
                    let name = response_name(r, &m.tool_calls);
                    out.push_str(&format!(
                        "<|tool_response>response:{name}{{value:{}}}<tool_response|>",
                        arg_value(&J::String(content))
                    ));
                    answered = true;
                    ended = Ended::ToolResponse;
                }
            }
            let has_content = if assistant {
                if m.content.is_empty() && m.images == 0 {
                    false
                } else {
                    let stripped = strip_thinking(&m.content);
                    let (content, next) = image_tags(&stripped, m.images, images);
                    images = next;
                    out.push_str(&content);
                    !stripped.trim().is_empty() || m.images > 0
                }
            } else {
                let (content, next) = image_tags(m.content.trim(), m.images, images);
                images = next;
                out.push_str(&content);
                !m.content.trim().is_empty() || m.images > 0
            };
            let next_role = msgs[i + 1..]
                .iter()
                .find(|r| r.role != "tool")
                .map_or("", |r| r.role.as_str());
            let continues =
                assistant && next_role == "assistant" && (m.tool_calls.is_empty() || answered);
            if ended == Ended::ToolCall {
                out.push_str("<|tool_response>");
            } else {
                // An answered call that ends the conversation leaves the turn open.
                let open_ended = answered && !has_content && next_role.is_empty();
                if !continues && !open_ended {
                    out.push_str("<turn|>\n");
                }
            }
            prev_role = &m.role;
        }

        match ended {
            Ended::Other => {
                out.push_str("<|turn>model\n");
                if self.empty_block_on_nothink && !thinking {
                    out.push_str("<|channel>thought\n<channel|>");
                }
            }
            Ended::ToolResponse if thinking => out.push_str("<|channel>thought\n"),
            _ => {}
        }
        Ok(out)
    }
}

/// `<|tool_call>call:NAME{key:value,…}<tool_call|>`, keys sorted.
fn call(c: &ToolCall) -> String {
    let mut keys: Vec<&String> = c.arguments.keys().collect();
    keys.sort();
    let args: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{k}:{}", arg_value(&c.arguments[k])))
        .collect();
    format!(
        "<|tool_call>call:{}{{{}}}<tool_call|>",
        c.name,
        args.join(",")
    )
}

/// A tool response's function: the call its `tool_call_id` names, else its `tool_name`, else
/// `unknown`.
fn response_name<'a>(r: &'a Message, calls: &'a [ToolCall]) -> &'a str {
    let by_id = r
        .tool_call_id
        .as_deref()
        .filter(|id| !id.is_empty())
        .and_then(|id| calls.iter().find(|c| c.id == id));
    match (by_id, r.tool_name.as_deref()) {
        (Some(c), _) => &c.name,
        (None, Some(n)) if !n.is_empty() => n,
        _ => "unknown",
    }
}

/// The template's `strip_thinking`: every `<|channel>…<channel|>` block removed (an unclosed one
/// drops the rest), then trimmed.
fn strip_thinking(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<|channel>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("<channel|>") {
            Some(end) => rest = &rest[start + end + "<channel|>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::renderers::gemma4_tools::Q;
    use crate::prompt::renderers::testutil::m;
    use serde_json::{json, Map};

    fn q(s: &str) -> String {
        s.replace('`', Q)
    }

    fn call(name: &str, id: &str, args: J) -> ToolCall {
        let arguments: Map<String, J> = args.as_object().cloned().unwrap_or_default();
        ToolCall {
            id: id.into(),
            index: 0,
            name: name.into(),
            arguments,
        }
    }

    fn calls(content: &str, thinking: Option<&str>, tc: Vec<ToolCall>) -> Message {
        Message {
            thinking: thinking.map(str::to_string),
            tool_calls: tc,
            ..m("assistant", content)
        }
    }

    fn tool(name: Option<&str>, id: Option<&str>, content: &str) -> Message {
        Message {
            tool_name: name.map(str::to_string),
            tool_call_id: id.map(str::to_string),
            ..m("tool", content)
        }
    }

    fn images(role: &str, content: &str, n: usize) -> Message {
        Message {
            images: n,
            ..m(role, content)
        }
    }

    fn bash() -> J {
        json!({"type": "function", "function": {"name": "bash", "description": "Run",
            "parameters": {"type": "object", "required": ["command"],
                "properties": {"command": {"type": "string", "description": "Cmd"}}}}})
    }

    const BASH: &str = "<|tool>declaration:bash{description:`Run`,parameters:{properties:{command:{description:`Cmd`,type:`STRING`}},required:[`command`],type:`OBJECT`}}<tool|>";

    struct Case {
        name: &'static str,
        msgs: Vec<Message>,
        tools: Vec<J>,
        think: Option<Think>,
        small: String,
        /// `None`: the large size renders the same plus the empty block where it applies.
        large: Option<String>,
    }

    fn case(name: &'static str, msgs: Vec<Message>, small: &str) -> Case {
        Case {
            name,
            msgs,
            tools: Vec::new(),
            think: None,
            small: q(small),
            large: None,
        }
    }

    #[test]
    fn renders_as_ollama() {
        let on = Some(Think::Bool(true));
        let cases = vec![
            Case {
                large: Some(q("<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")),
                ..case("user only", vec![m("user", "Hello")], "<bos><|turn>user\nHello<turn|>\n<|turn>model\n")
            },
            Case {
                think: on.clone(),
                ..case(
                    "thinking opens a system turn; no empty block when thinking",
                    vec![m("user", "Hello")],
                    "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHello<turn|>\n<|turn>model\n",
                )
            },
            Case {
                tools: vec![bash()],
                think: Some(Think::Level("high".into())),
                ..case(
                    "developer trimmed, tools after it, a level thinks",
                    vec![m("developer", "  Be terse.\n "), m("user", " Hi ")],
                    &format!("<bos><|turn>system\n<|think|>\nBe terse.{BASH}<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"),
                )
            },
            Case {
                think: Some(Think::Level("bogus".into())),
                large: Some(q("<bos><|turn>system\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")),
                ..case(
                    "empty system still opens the turn; unknown level is off",
                    vec![m("system", ""), m("user", "Hi")],
                    "<bos><|turn>system\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n",
                )
            },
            Case {
                think: Some(Think::Bool(false)),
                large: Some(q("<bos><|turn>user\nHi<turn|>\n<|turn>model\nA1<turn|>\n<|turn>user\nMid<turn|>\n<|turn>model\n<turn|>\n<|turn>user\nMore<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")),
                ..case(
                    "old thinking stripped from content, thinking field before the last user dropped",
                    vec![
                        m("user", "Hi"),
                        calls("<|channel>thought\nhmm<channel|>  A1 ", Some("old"), vec![]),
                        m("user", "Mid"),
                        calls("<|channel>only thoughts<channel|>", None, vec![]),
                        m("user", "More"),
                    ],
                    "<bos><|turn>user\nHi<turn|>\n<|turn>model\nA1<turn|>\n<|turn>user\nMid<turn|>\n<|turn>model\n<turn|>\n<|turn>user\nMore<turn|>\n<|turn>model\n",
                )
            },
            case(
                "adjacent assistants share a turn; a final assistant is closed, not continued",
                vec![m("user", "Start"), m("assistant", "One."), m("assistant", " Two. <|channel>open")],
                "<bos><|turn>user\nStart<turn|>\n<|turn>model\nOne.Two.<turn|>\n<|turn>model\n",
            ),
            Case {
                tools: vec![bash()],
                ..case(
                    "pending call ends the prompt at the response tag",
                    vec![m("user", "Go"), calls("Let me check.", None, vec![call("bash", "", json!({"command": "ls"}))])],
                    &format!("<bos><|turn>system\n{BASH}<turn|>\n<|turn>user\nGo<turn|>\n<|turn>model\n<|tool_call>call:bash{{command:`ls`}}<tool_call|>Let me check.<|tool_response>"),
                )
            },
            Case {
                tools: vec![bash()],
                think: on.clone(),
                ..case(
                    "answered calls after the last user: thinking printed, thought channel pre-opened",
                    vec![
                        m("system", "S"),
                        m("user", "Q"),
                        calls("", Some("use bash"), vec![call("bash", "c1", json!({"command": "ls"}))]),
                        tool(None, Some("c1"), " out\n"),
                    ],
                    &format!("<bos><|turn>system\n<|think|>\nS{BASH}<turn|>\n<|turn>user\nQ<turn|>\n<|turn>model\n<|channel>thought\nuse bash\n<channel|><|tool_call>call:bash{{command:`ls`}}<tool_call|><|tool_response>response:bash{{value:` out\n`}}<tool_response|><|channel>thought\n"),
                )
            },
            case(
                "responses by id, name, or unknown; the answer continues the turn",
                vec![
                    m("user", "List"),
                    calls("", None, vec![call("bash", "a", json!({"command": "ls"})), call("read", "b", json!({"path": "x"}))]),
                    tool(None, Some("b"), "X"),
                    tool(Some("bash"), Some("zzz"), "L"),
                    tool(Some(""), None, "?"),
                    m("assistant", "Done."),
                    m("user", "Thanks"),
                ],
                "<bos><|turn>user\nList<turn|>\n<|turn>model\n<|tool_call>call:bash{command:`ls`}<tool_call|><|tool_call>call:read{path:`x`}<tool_call|><|tool_response>response:read{value:`X`}<tool_response|><|tool_response>response:bash{value:`L`}<tool_response|><|tool_response>response:unknown{value:`?`}<tool_response|>Done.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n",
            ),
            case(
                "answered call followed by a user closes the turn",
                vec![
                    m("user", "W?"),
                    calls("", None, vec![call("get_weather", "", json!({"city": "Paris"}))]),
                    tool(Some("get_weather"), None, r#"{"t": 15}"#),
                    m("user", "Thanks"),
                ],
                "<bos><|turn>user\nW?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{city:`Paris`}<tool_call|><|tool_response>response:get_weather{value:`{\"t\": 15}`}<tool_response|><turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n",
            ),
            Case {
                large: Some(q("<bos><|turn>user\nUse it<turn|>\n<|turn>model\nFirst.<|tool_call>call:bash{command:null}<tool_call|><|tool_response>response:bash{value:`done`}<tool_response|>Checking.Done.<turn|>\n<|turn>user\nNext<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")),
                ..case(
                    "content of a calling message follows its responses",
                    vec![
                        m("user", "Use it"),
                        m("assistant", "First."),
                        calls("Checking.", None, vec![call("bash", "", json!({"command": null}))]),
                        tool(Some("bash"), None, "done"),
                        m("assistant", "Done."),
                        m("user", "Next"),
                    ],
                    "<bos><|turn>user\nUse it<turn|>\n<|turn>model\nFirst.<|tool_call>call:bash{command:null}<tool_call|><|tool_response>response:bash{value:`done`}<tool_response|>Checking.Done.<turn|>\n<|turn>user\nNext<turn|>\n<|turn>model\n",
                )
            },
            case(
                "arguments: sorted keys, nested maps, arrays, numbers",
                vec![
                    m("user", "Go"),
                    calls("", None, vec![call("f", "", json!({"zzz": "last", "aaa": {"b": 1, "a": [1.5, true, null]}, "n": 2.0}))]),
                    tool(Some("f"), None, ""),
                ],
                "<bos><|turn>user\nGo<turn|>\n<|turn>model\n<|tool_call>call:f{aaa:{a:[1.5,true,null],b:1},n:2,zzz:`last`}<tool_call|><|tool_response>response:f{value:``}<tool_response|>",
            ),
            case(
                "images numbered in render order: responses before the caller's content",
                vec![
                    images("user", " look ", 2),
                    calls("", None, vec![call("f", "", json!({}))]),
                    Message { images: 1, ..tool(Some("f"), None, "img:") },
                    images("assistant", "", 1),
                    images("user", "[img] and", 1),
                ],
                "<bos><|turn>user\n[img-0][img-1] look<turn|>\n<|turn>model\n<|tool_call>call:f{}<tool_call|><|tool_response>response:f{value:`[img-2] img:`}<tool_response|>[img-3]<turn|>\n<|turn>user\n[img-4] and<turn|>\n<|turn>model\n",
            ),
            case(
                "stray tool messages dropped, later system and other roles as turns",
                vec![m("user", "a"), tool(Some("x"), None, "dropped"), m("system", " s "), m("foo", " x ")],
                "<bos><|turn>user\na<turn|>\n<|turn>system\ns<turn|>\n<|turn>foo\nx<turn|>\n<|turn>model\n",
            ),
        ];
        for c in cases {
            let small = Gemma4::small()
                .render(&c.msgs, &c.tools, c.think.as_ref())
                .unwrap();
            assert_eq!(small, c.small, "small: {}", c.name);
            let large = Gemma4::large()
                .render(&c.msgs, &c.tools, c.think.as_ref())
                .unwrap();
            // Unless spelled out: the large size adds the empty thought block to a generation
            // prompt when thinking is off.
            let block = c.small.ends_with("<|turn>model\n")
                && !c.think.as_ref().is_some_and(Think::enabled);
            let derived = c.small.clone()
                + if block {
                    "<|channel>thought\n<channel|>"
                } else {
                    ""
                };
            assert_eq!(large, c.large.unwrap_or(derived), "large: {}", c.name);
        }
    }

    #[test]
    fn leading_bos_and_strip_thinking() {
        assert_eq!(Gemma4::small().leading_bos(), "<bos>");
        assert_eq!(Gemma4::large().leading_bos(), "<bos>");
        for (text, want) in [
            (
                "<|channel>a<channel|>Middle<|channel>b<channel|>Done",
                "MiddleDone",
            ),
            ("  keep <|channel>never closed", "keep"),
            ("plain ", "plain"),
            ("<channel|>x", "<channel|>x"),
        ] {
            assert_eq!(strip_thinking(text), want, "{text}");
        }
    }
}
