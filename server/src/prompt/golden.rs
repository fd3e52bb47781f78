//! Golden tests: family-style templates under `testdata/<name>/` rendered for fixed
//! conversations and compared byte-for-byte with hand-derived expected outputs.

use serde_json::json;

use super::*;

fn user() -> Vec<Message> {
    vec![Message::new("user", "Hello!")]
}

fn multi() -> Vec<Message> {
    vec![
        Message::new("user", "Hello!"),
        Message::new("assistant", "Hi there."),
        Message::new("user", "How are you?"),
    ]
}

fn system() -> Vec<Message> {
    let mut m = vec![Message::new("system", "You are terse.")];
    m.extend(multi());
    m
}

fn chat(t: &Template, messages: Vec<Message>) -> String {
    render_chat(
        t,
        &RenderRequest {
            messages,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Asserts the three standard conversations against `<dir>/{user,multi,system}.txt`.
fn check_family(name: &str, src: &str, want_user: &str, want_multi: &str, want_system: &str) {
    let t = Template::parse_go(src).unwrap();
    assert_eq!(chat(&t, user()), want_user, "{name}: user");
    assert_eq!(
        chat(&t, multi()),
        want_multi,
        "{name}: user, assistant, user"
    );
    assert_eq!(
        chat(&t, system()),
        want_system,
        "{name}: system, user, assistant, user"
    );
}

macro_rules! family {
    ($test:ident, $dir:literal) => {
        #[test]
        fn $test() {
            check_family(
                $dir,
                include_str!(concat!("testdata/", $dir, "/template.gotmpl")),
                include_str!(concat!("testdata/", $dir, "/user.txt")),
                include_str!(concat!("testdata/", $dir, "/multi.txt")),
                include_str!(concat!("testdata/", $dir, "/system.txt")),
            );
        }
    };
}

family!(golden_chatml, "chatml");
family!(golden_llama3, "llama3");
family!(golden_gemma, "gemma");
family!(golden_mistral, "mistral");
family!(golden_legacy_prompt_response, "legacy");

#[test]
fn golden_chatml_tools_round_trip() {
    let t = Template::parse_go(include_str!("testdata/chatml/template.gotmpl")).unwrap();
    let tools = vec![json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather",
            "parameters": {
                "type": "object",
                "required": ["location"],
                // Insertion order differs from Go's sorted map order on purpose; "default" is
                // not an Ollama ToolProperty field and must be dropped.
                "properties": {
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                    "location": {"type": "string", "description": "City"}
                }
            }
        }
    })];
    let mut args = serde_json::Map::new();
    args.insert("unit".into(), json!("celsius"));
    args.insert("location".into(), json!("Paris"));
    let call = ToolCall {
        id: "call_abc12345".into(),
        index: 0,
        name: "get_weather".into(),
        arguments: args,
    };
    let messages = vec![
        Message::new("user", "Weather in Paris?"),
        Message {
            tool_calls: vec![call],
            ..Message::new("assistant", "")
        },
        Message {
            tool_name: Some("get_weather".into()),
            ..Message::new("tool", "22C")
        },
    ];
    let out = render_chat(
        &t,
        &RenderRequest {
            messages,
            tools,
            think: None,
        },
    )
    .unwrap();
    assert_eq!(out, include_str!("testdata/chatml/tools.txt"));
    assert!(t.uses_tools());
    assert_eq!(t.tool_call_tag(), "<tool_call>");
}

fn smollm2() -> Template {
    let src = include_str!("testdata/smollm2/template.jinja").to_string();
    Template::jinja(src, "<|im_start|>".into(), "<|im_end|>".into()).unwrap()
}

#[test]
fn golden_smollm2_jinja() {
    let t = smollm2();
    // No system message: the template injects its default system prompt.
    assert_eq!(
        chat(&t, multi()),
        include_str!("testdata/smollm2/multi.txt")
    );
    assert_eq!(
        chat(&t, system()),
        include_str!("testdata/smollm2/system.txt")
    );
    assert!(!t.uses_tools());
    assert!(t.thinking_tags().is_none());
}
