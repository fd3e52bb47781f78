//! Parser selection and the `thinking_close` contract across families.

use super::testutil::run;
use super::*;

fn go(src: &str) -> Template {
    Template::parse_go(src).unwrap()
}

const QWEN: &str = "{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}{{ if .ToolCalls }}<tool_call>\n{{ range .ToolCalls }}{{ json .Function }}{{ end }}</tool_call>{{ end }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";

#[test]
fn thinking_model_closes_at_its_tag_unless_off_or_prefilled() {
    let t = go(QWEN);
    let on = Think::Bool(true);
    let off = Think::Bool(false);
    assert_eq!(
        for_model(&t, &Options::default()).thinking_close(),
        ["</think>"],
        "unset = on"
    );
    let o = Options {
        think: Some(&on),
        ..Default::default()
    };
    assert_eq!(for_model(&t, &o).thinking_close(), ["</think>"]);
    let o = Options {
        think: Some(&off),
        ..Default::default()
    };
    assert!(for_model(&t, &o).thinking_close().is_empty());
    let prefill = Message::new("assistant", "The answer is");
    let o = Options {
        think: Some(&on),
        last: Some(&prefill),
        ..Default::default()
    };
    assert!(for_model(&t, &o).thinking_close().is_empty());
    // A model without thinking tags never names closing strings.
    let plain = go("{{ .Prompt }}");
    assert!(for_model(&plain, &Options::default())
        .thinking_close()
        .is_empty());
}

#[test]
fn thinking_off_passes_tags_through_as_content() {
    let off = Think::Bool(false);
    let mut p = for_model(
        &go(QWEN),
        &Options {
            think: Some(&off),
            ..Default::default()
        },
    );
    let r = run(p.as_mut(), &["<think>x</think>y"]);
    assert_eq!(
        (r.thinking.as_str(), r.content.as_str()),
        ("", "<think>x</think>y")
    );
}

#[test]
fn pre_opened_prompt_and_tool_calls_after_thinking() {
    let tools = vec!["get_weather".to_string()];
    let o = Options {
        tools: &tools,
        prompt: "<|im_start|>assistant\n<think>\n",
        ..Default::default()
    };
    let mut p = for_model(&go(QWEN), &o);
    let r = run(
        p.as_mut(),
        &[
            "need wea",
            "ther</th",
            "ink>\n\nOk.<tool_",
            "call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call>",
        ],
    );
    assert_eq!(r.thinking, "need weather");
    assert_eq!(r.content, "Ok.");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments["city"], "Rome");
}

#[test]
fn harmony_templates_get_the_harmony_parser() {
    let t = go("{{ range .Messages }}<|start|>{{ .Role }}<|channel|>final<|message|>{{ .Content }}<|end|>{{ end }}<|start|>assistant");
    // Ollama's rule: a gpt-oss family and the template's `<|start|>` and `<|end|>`.
    assert!(is_harmony(&t, "gptoss") && is_harmony(&t, "gpt-oss"));
    assert!(!is_harmony(&t, "llama") && !is_harmony(&t, ""));
    assert!(is_harmony(&go("<|start|><|end|>{{ .Prompt }}"), "gptoss"));
    assert!(!is_harmony(&go("<|start|>{{ .Prompt }}"), "gptoss"));
    // The harmony parser is the model's unless it names its own.
    assert_eq!(parser_name(&t, "gptoss", ""), "harmony");
    assert_eq!(parser_name(&t, "gptoss", "qwen3"), "qwen3");
    assert_eq!(parser_name(&t, "llama", ""), "");
    let o = Options {
        named: parser_name(&t, "gptoss", ""),
        ..Default::default()
    };
    let mut p = for_model(&t, &o);
    assert_eq!(p.thinking_close(), [harmony::FINAL_HEADER]);
    let r = run(
        p.as_mut(),
        &["<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b"],
    );
    assert_eq!((r.thinking.as_str(), r.content.as_str()), ("a", "b"));
}

#[test]
fn only_harmony_renames_the_prompts_tools() {
    let tools = vec![serde_json::json!({"type": "function", "function": {"name": "get-weather"}})];
    assert_eq!(prompt_tools("", &tools), tools);
    assert_eq!(prompt_tools("qwen3", &tools), tools);
    assert_eq!(
        prompt_tools("harmony", &tools)[0]["function"]["name"],
        "get_weather"
    );
}

#[test]
fn tool_names_come_from_function_entries() {
    let tools = vec![
        serde_json::json!({"type": "function", "function": {"name": "a"}}),
        serde_json::json!({"type": "function"}),
    ];
    assert_eq!(tool_names(&tools), ["a"]);
}

#[test]
fn partial_tag_len_finds_the_longest_held_suffix() {
    assert_eq!(partial_tag_len("abc</th", &["</think>"]), 4);
    assert_eq!(partial_tag_len("abc", &["</think>"]), 0);
    assert_eq!(partial_tag_len("x<", &["<|end|>", "<|call|>"]), 1);
    // A complete tag is not a partial one.
    assert_eq!(partial_tag_len("</think>", &["</think>"]), 0);
    assert_eq!(partial_tag_len("é<", &["<a"]), 1);
}

#[test]
fn emit_certain_holds_a_partial_tag_and_the_whitespace_before_it() {
    for (buf, out, held) in [
        ("a b \n</th", "a b", " \n</th"),
        ("a b  ", "a b", "  "),
        ("a <x", "a <x", ""),
        ("\u{3000}", "", "\u{3000}"),
    ] {
        let (mut b, mut o) = (buf.to_string(), String::new());
        emit_certain(&mut b, &["</think>"], &mut o);
        assert_eq!((o.as_str(), b.as_str()), (out, held), "{buf:?}");
    }
}

#[test]
fn a_named_parser_splits_thinking_whatever_the_template_shows() {
    use crate::prompt::Think;
    let plain = Template::parse_go("{{ .Prompt }}").unwrap();
    let think = Think::Bool(true);
    let mut p = for_model(
        &plain,
        &Options {
            think: Some(&think),
            named: "deepseek-r1",
            ..Default::default()
        },
    );
    let out = p.add("<think>hmm</think>Hello", true);
    assert_eq!(
        (out.thinking.as_str(), out.content.as_str()),
        ("hmm", "Hello")
    );
    // Without the name the same template parses nothing.
    let mut p = for_model(
        &plain,
        &Options {
            think: Some(&think),
            ..Default::default()
        },
    );
    assert_eq!(
        p.add("<think>hmm</think>Hello", true).content,
        "<think>hmm</think>Hello"
    );
}

#[test]
fn arguments_come_out_as_ollamas_api_prints_them() {
    // Nested objects sorted, whole floats as integers; top-level keys in the model's order.
    let tools = vec!["f".to_string()];
    let mut p = for_model(
        &go("{{ .Prompt }}"),
        &Options {
            named: "ministral",
            tools: &tools,
            ..Default::default()
        },
    );
    let r = run(
        p.as_mut(),
        &[r#"[TOOL_CALLS]f[ARGS]{"z": 1E2, "a": {"y": 2.0, "b": [{"d": 1, "c": 0.5}]}}"#],
    );
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(
        serde_json::to_string(&r.tool_calls[0].arguments).unwrap(),
        r#"{"z":100,"a":{"b":[{"c":0.5,"d":1}],"y":2}}"#
    );
}
