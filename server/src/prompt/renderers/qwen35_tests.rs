//! Tests of the Qwen 3.5 format: one table of rendered chats for each of its names (`qwen3.5`,
//! `qwen3.8`, `ornith`), and the printing of call arguments. The `qwen3.8` refusals are tested in
//! [`super::super::qwen38`].

use super::*;
use crate::prompt::renderers::testutil::call;
use serde_json::json;

/// The weather tool as Ollama prints it in the tools list (Go JSON, spaced).
const WEATHER: &str = r#"{"type": "function", "function": {"name": "get_weather", "description": "Weather \u003cnow\u003e \u0026 later", "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"], "enum": ["c", "f"]}}}}}"#;

fn weather() -> J {
    json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather <now> & later", "parameters": {"type": "object",
        "required": ["city"], "properties": {"city": {"type": "string"},
        "unit": {"type": ["string", "null"], "enum": ["c", "f"]}}}}})
}

/// One rendered chat; `want` may use `{WEATHER}` and `{TOOLS}` (the calling instructions).
struct Case {
    name: &'static str,
    renderer: &'static str,
    messages: J,
    tools: J,
    think: Option<Think>,
    want: &'static str,
}

/// Messages from `[{role, content, thinking?, images?: count, tool_calls?: [{name, arguments}]}]`.
pub(in crate::prompt::renderers) fn messages(v: &J) -> Vec<Message> {
    let text = |m: &J, k: &str| m.get(k).and_then(J::as_str).map(String::from);
    let list = v.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|m| Message {
            thinking: text(m, "thinking"),
            images: m.get("images").and_then(J::as_u64).unwrap_or(0) as usize,
            tool_calls: m
                .get("tool_calls")
                .and_then(J::as_array)
                .map_or(vec![], |cs| {
                    cs.iter()
                        .map(|c| call(&text(c, "name").unwrap_or_default(), c["arguments"].clone()))
                        .collect()
                }),
            ..Message::new(
                &text(m, "role").unwrap_or_default(),
                &text(m, "content").unwrap_or_default(),
            )
        })
        .collect()
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let r = super::super::for_name(c.renderer).expect("registered");
        assert_eq!(r.leading_bos(), "");
        let tools = c.tools.as_array().map(Vec::as_slice).unwrap_or_default();
        let got = r.render(&messages(&c.messages), tools, c.think.as_ref());
        let want = c
            .want
            .replace("{WEATHER}", WEATHER)
            .replace("{TOOLS}", TOOLS_POSTAMBLE);
        assert_eq!(got.unwrap(), want, "{}", c.name);
    }
}

#[test]
fn qwen35_prompts() {
    check(vec![
        Case {
            name: "system trimmed, thinking off closes an empty block",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "system", "content": "  Be brief. "},
                {"role": "user", "content": "Hi"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(false)),
            want: r#"<|im_start|>system
Be brief.<|im_end|>
<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>

</think>

"#,
        },
        Case {
            name: "empty system still opens a turn",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "system", "content": ""},
                {"role": "user", "content": "Hi"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(true)),
            want: r#"<|im_start|>system
<|im_end|>
<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "tools with the system text after them",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "system", "content": "Sys."},
                {"role": "user", "content": "Weather?"}
            ]),
            tools: json!([weather()]),
            think: Some(Think::Level("high".into())),
            want: r#"<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{WEATHER}{TOOLS}

Sys.<|im_end|>
<|im_start|>user
Weather?<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "a tool round keeps its reasoning and groups results",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "thinking": " need data ", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 1000000, "opts": {"z": 1, "a": "<b>"}}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]},
                {"role": "tool", "content": "22C"},
                {"role": "tool", "content": "18C"}
            ]),
            tools: json!([weather()]),
            think: None,
            want: r#"<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{WEATHER}{TOOLS}<|im_end|>
<|im_start|>user
Weather?<|im_end|>
<|im_start|>assistant
<think>
need data
</think>

Checking.

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=days>
1e+06
</parameter>
<parameter=opts>
{"a":"\u003cb\u003e","z":1}
</parameter>
</function>
</tool_call>
<tool_call>
<function=get_weather>
<parameter=city>
Rome
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
22C
</tool_response>
<tool_response>
18C
</tool_response><|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "older turns lose reasoning, inline or not",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "user", "content": "Q1"},
                {"role": "assistant", "content": "<think>hidden</think>\n\nA1"},
                {"role": "user", "content": "Q2"},
                {"role": "assistant", "content": "A2", "thinking": "dropped"},
                {"role": "user", "content": "Q3"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(true)),
            want: r#"<|im_start|>user
Q1<|im_end|>
<|im_start|>assistant
A1<|im_end|>
<|im_start|>user
Q2<|im_end|>
<|im_start|>assistant
A2<|im_end|>
<|im_start|>user
Q3<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "tool-response user messages do not count as the query",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                {"role": "user", "content": "<tool_response>\n3C\n</tool_response>"},
                {"role": "assistant", "content": "Cold.", "thinking": "sum up"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(true)),
            want: r#"<|im_start|>user
Q<|im_end|>
<|im_start|>assistant
<think>

</think>

<tool_call>
<function=get_weather>
<parameter=city>
Oslo
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
3C
</tool_response><|im_end|>
<|im_start|>assistant
<think>
sum up
</think>

Cold."#,
        },
        Case {
            name: "assistant prefill is continued",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "The answer is", "thinking": "t"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(true)),
            want: r#"<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>
t
</think>

The answer is"#,
        },
        Case {
            name: "images numbered across the chat",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "system", "content": "sys", "images": 1},
                {"role": "user", "content": "look", "images": 2},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "and [img] here", "images": 1}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(false)),
            want: r#"<|im_start|>system
[img-0] sys<|im_end|>
<|im_start|>user
[img-1][img-2] look<|im_end|>
<|im_start|>assistant
ok<|im_end|>
<|im_start|>user
and [img-3] here<|im_end|>
<|im_start|>assistant
<think>

</think>

"#,
        },
        Case {
            name: "other roles: late system printed, developer dropped",
            renderer: "qwen3.5",
            messages: json!([
                {"role": "user", "content": "a"},
                {"role": "system", "content": "late"},
                {"role": "developer", "content": "dev"},
                {"role": "user", "content": "b"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(false)),
            want: r#"<|im_start|>user
a<|im_end|>
<|im_start|>system
late<|im_end|>
<|im_start|>user
b<|im_end|>
<|im_start|>assistant
<think>

</think>

"#,
        },
    ]);
}

#[test]
fn qwen38_and_ornith_prompts() {
    check(vec![
        Case {
            name: "unset think gives xhigh guidance",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "user", "content": "Hello"}
            ]),
            tools: json!([]),
            think: None,
            want: r#"<|im_start|>system
Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final answer.<|im_end|>
<|im_start|>user
Hello<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "developer and system fold into one leading system",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "system", "content": " Base. "},
                {"role": "user", "content": "Hi"},
                {"role": "developer", "content": "Use Go."},
                {"role": "system", "content": "  "},
                {"role": "user", "content": "More"}
            ]),
            tools: json!([]),
            think: Some(Think::Level("low".into())),
            want: r#"<|im_start|>system
Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to the conclusion without unnecessary elaboration.

Base.

Use Go.<|im_end|>
<|im_start|>user
Hi<|im_end|>
<|im_start|>user
More<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "single system stays, medium adds nothing",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "system", "content": "Only."},
                {"role": "user", "content": "Hi"}
            ]),
            tools: json!([]),
            think: Some(Think::Level("medium".into())),
            want: r#"<|im_start|>system
Only.<|im_end|>
<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "empty system and think off print no system turn",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "system", "content": ""},
                {"role": "user", "content": "Hi"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(false)),
            want: r#"<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>

</think>

"#,
        },
        Case {
            name: "tools put the guidance first",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "developer", "content": "Dev."},
                {"role": "user", "content": "Weather?"}
            ]),
            tools: json!([weather()]),
            think: Some(Think::Level("max".into())),
            want: r#"<|im_start|>system
Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final answer.

# Tools

You have access to the following functions:

<tools>
{WEATHER}{TOOLS}

Dev.<|im_end|>
<|im_start|>user
Weather?<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "unknown roles are kept, inline think is not cut",
            renderer: "qwen3.8",
            messages: json!([
                {"role": "user", "content": "Q1"},
                {"role": "narrator", "content": "aside"},
                {"role": "assistant", "content": "<think>a</think>b"},
                {"role": "user", "content": "Q2"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(true)),
            want: r#"<|im_start|>user
Q1<|im_end|>
<|im_start|>narrator
aside<|im_end|>
<|im_start|>assistant
<think>

</think>

<think>a</think>b<|im_end|>
<|im_start|>user
Q2<|im_end|>
<|im_start|>assistant
<think>
"#,
        },
        Case {
            name: "ornith prints think blocks on every assistant turn",
            renderer: "ornith",
            messages: json!([
                {"role": "user", "content": "Q1"},
                {"role": "assistant", "content": "A1"},
                {"role": "user", "content": "Q2"},
                {"role": "assistant", "content": "<think>x</think>A2", "thinking": "kept"}
            ]),
            tools: json!([]),
            think: Some(Think::Bool(false)),
            want: r#"<|im_start|>user
Q1<|im_end|>
<|im_start|>assistant
<think>

</think>

A1<|im_end|>
<|im_start|>user
Q2<|im_end|>
<|im_start|>assistant
<think>
kept
</think>

<think>x</think>A2"#,
        },
    ]);
}

#[test]
fn call_arguments_print_as_go_values() {
    let cases = [
        (json!("raw <text>"), "raw <text>"),
        (json!(null), "null"),
        (json!(false), "false"),
        (json!(3), "3"),
        (json!(2.5e-7), "2.5e-07"),
        (json!(123456789), "1.23456789e+08"),
        (
            json!({"b": [1.0, "&"], "a": {}}),
            r#"{"a":{},"b":[1,"\u0026"]}"#,
        ),
    ];
    for (v, want) in cases {
        assert_eq!(argument(&v), want, "{v}");
    }
}
