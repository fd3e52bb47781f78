//! Tests for the template-tag tool-call parser (`tools.rs`).

use super::*;
use crate::prompt::parsers::testutil::{every_split, run};
use serde_json::json;

const NAMES: &[&str] = &[
    "get_temperature",
    "get_conditions",
    "say_hello",
    "say_hello_world",
    "get_address",
    "add",
];

fn parser(tag: &str) -> ToolParser {
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    ToolParser::new(tag, &names)
}

/// Every chunking of `s` gives `content` and `calls` (name, arguments).
fn check(tag: &str, s: &str, content: &str, calls: &[(&str, Value)]) {
    every_split(s, |chunks| {
        let r = run(&mut parser(tag), chunks);
        assert_eq!(r.content, content, "{chunks:?}");
        let got: Vec<(&str, Value)> = r
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), Value::Object(c.arguments.clone())))
            .collect();
        assert_eq!(got, calls, "{chunks:?}");
        let idx: Vec<i64> = r.tool_calls.iter().map(|c| c.index).collect();
        assert_eq!(idx, (0..calls.len() as i64).collect::<Vec<_>>());
    });
}

const DS: &str = "<｜tool▁calls▁begin｜>";

#[test]
fn tagged_json_calls_with_content_before() {
    let tc = "<tool_call>";
    check(tc, "Hello, how can I help?", "Hello, how can I help?", &[]);
    check(
        tc,
        r#"Okay, both! <tool_call>{"name": "get_temperature", "arguments": {"city": "London", "format": "fahrenheit"}}</tool_call><tool_call>{"name": "get_conditions", "arguments": "{\"location\": \"Tokyo\"}"}</tool_call>"#,
        "Okay, both! ",
        &[
            (
                "get_temperature",
                json!({"city": "London", "format": "fahrenheit"}),
            ),
            ("get_conditions", json!({"location": "Tokyo"})),
        ],
    );
    // Name after the arguments; `parameters`; nested `function`; keyed by the tool's name.
    check(
        tc,
        r#"<tool_call>{"arguments": {"a": "5", "b": "10"}, "name": "add"}</tool_call>"#,
        "",
        &[("add", json!({"a": "5", "b": "10"}))],
    );
    check(
        tc,
        r#"<tool_call>{"function": {"name": "add", "parameters": {"a": 1}}}"#,
        "",
        &[("add", json!({"a": 1}))],
    );
    check(
        tc,
        r#"<tool_call>{"get_address": {"location": "Rome"}}"#,
        "",
        &[("get_address", json!({"location": "Rome"}))],
    );
}

/// Arguments decode as Go's `json.Unmarshal` reads them (tools.go findArguments): a lone
/// surrogate escape is U+FFFD and the call stands; a number beyond float64 fails the object, so
/// it is no call and the search goes on past it (a brace-tagged response is then content).
#[test]
fn arguments_decode_as_go_reads_them() {
    let tc = "<tool_call>";
    check(
        tc,
        r#"<tool_call>{"name": "add", "arguments": {"a": "\ud800", "b": "\ud83d\ude00", "c": "\\ud800"}}</tool_call>"#,
        "",
        &[(
            "add",
            json!({"a": "\u{fffd}", "b": "\u{1f600}", "c": "\\ud800"}),
        )],
    );
    // The same inside arguments given as a JSON string.
    check(
        tc,
        r#"<tool_call>{"name": "add", "arguments": "{\"a\": \"\\udc00x\"}"}</tool_call>"#,
        "",
        &[("add", json!({"a": "\u{fffd}x"}))],
    );
    check(
        tc,
        r#"Sure. <tool_call>{"name": "add", "arguments": {"a": 1e400}}</tool_call>"#,
        "Sure. ",
        &[],
    );
    check(
        tc,
        r#"<tool_call>{"name": "add", "arguments": {"a": 1e400}}</tool_call><tool_call>{"name": "add", "arguments": {"a": 1e-400}}</tool_call>"#,
        "",
        // Underflow is float64 0, which Go prints as `0`.
        &[("add", json!({"a": 0}))],
    );
    let overflow = r#"{"name": "add", "arguments": {"a": 1e400}} and more"#;
    check("{", overflow, overflow, &[]);
    check(
        "{",
        r#"{"name": "add", "arguments": {"a": "\ud800"}}"#,
        "",
        &[("add", json!({"a": "\u{fffd}"}))],
    );
}

#[test]
fn argument_values_are_go_values() {
    // Ollama decodes the arguments into `map[string]any`: every number is a float64 (`1.0` is
    // the integer 1 on the wire, digits past 2^53 are lost), nested objects print with sorted
    // keys; the top-level keys keep the model's order.
    let r = run(
        &mut parser("<tool_call>"),
        &[concat!(
            r#"<tool_call>{"name":"add","arguments":{"z":1.0,"big":9007199254740993,"#,
            r#""neg":-2.50,"deep":{"y":[1.0,{"b":2.0,"a":0.5}],"x":1E2}}}"#
        )],
    );
    let args = &r.tool_calls[0].arguments;
    assert_eq!(
        serde_json::to_string(args).unwrap(),
        r#"{"z":1,"big":9007199254740992,"neg":-2.5,"deep":{"x":100,"y":[1,{"a":0.5,"b":2}]}}"#
    );
}

#[test]
fn argument_keys_keep_the_model_order() {
    let r = run(
        &mut parser("<tool_call>"),
        &[r#"<tool_call>{"name":"add","arguments":{"b":1,"a":2}}"#],
    );
    let keys: Vec<&String> = r.tool_calls[0].arguments.keys().collect();
    assert_eq!(keys, ["b", "a"]);
}

#[test]
fn other_call_formats_parse_by_name_and_first_object() {
    let ds = format!(
        "<think>Wait, I need to call a tool</think>{DS}<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_temperature\n```json\n{{\"city\": \"Tokyo\"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    );
    check(
        DS,
        &ds,
        "<think>Wait, I need to call a tool</think>",
        &[("get_temperature", json!({"city": "Tokyo"}))],
    );
    check(
        "[TOOL_CALLS]",
        r#"[TOOL_CALLS]get_temperature[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1}"#,
        "",
        &[
            ("get_temperature", json!({"city": "Paris"})),
            ("add", json!({"a": 1})),
        ],
    );
    check(
        "<function=",
        r#"Sure.<function=get_temperature>{"city": "Oslo"}</function>"#,
        "Sure.",
        &[("get_temperature", json!({"city": "Oslo"}))],
    );
    check(
        "<tool_call>",
        r#"<tool_call>get_temperature({"location": "San Francisco, CA"})</tool_call>"#,
        "",
        &[("get_temperature", json!({"location": "San Francisco, CA"}))],
    );
    // Braces and quotes inside strings do not end the object.
    check(
        "<tool_call>",
        r#"<tool_call>{"name": "add", "arguments": {"code": "if (x) { return \"}\"; }"}}"#,
        "",
        &[("add", json!({"code": "if (x) { return \"}\"; }"}))],
    );
}

#[test]
fn text_after_a_tag_is_swallowed_and_later_calls_still_found() {
    check(
        "<tool_call>",
        r#"A <tool_call>{"name":"add","arguments":{"a":1}}</tool_call> then some text <tool_call>{"name":"say_hello","arguments":{}}</tool_call> bye"#,
        "A ",
        &[("add", json!({"a": 1})), ("say_hello", json!({}))],
    );
}

#[test]
fn cut_off_unknown_or_argumentless_calls_leave_no_content() {
    let tc = "<tool_call>";
    check(tc, r#"x<tool_call>{"name":"add","argu"#, "x", &[]);
    check(tc, r#"<tool_call>{"name":"rm_rf","arguments":{}}"#, "", &[]);
    check(
        tc,
        r#"<tool_call>{"name": "say_hello"}</tool_call>"#,
        "",
        &[],
    );
    // An argument-less object blocks the calls after it.
    check(
        tc,
        r#"<tool_call>{"name":"say_hello"}</tool_call><tool_call>{"name":"add","arguments":{}}"#,
        "",
        &[],
    );
    // Arguments that are not an object.
    check(tc, r#"<tool_call>{"name":"add","arguments":[1]}"#, "", &[]);
}

#[test]
fn longest_name_wins_and_partial_names_wait() {
    let tc = "<tool_call>";
    check(
        tc,
        r#"<tool_call>{"name": "say_hello_world", "arguments": {}}</tool_call><tool_call>{"name": "say_hello", "arguments": {}}</tool_call>"#,
        "",
        &[("say_hello_world", json!({})), ("say_hello", json!({}))],
    );
    let mut p = parser(tc);
    let a = p.add(r#"<tool_call>{"name": "say_hello"#, false);
    assert!(a.tool_calls.is_empty() && a.content.is_empty());
    let b = p.add(r#"_world", "arguments": {}}"#, false);
    assert_eq!(b.tool_calls[0].name, "say_hello_world");
    // At the end of the stream a trailing name prefix holds nothing back.
    check(
        "[TOOL_CALLS]",
        r#"[TOOL_CALLS]add[ARGS]{"a": 1} ge"#,
        "",
        &[("add", json!({"a": 1}))],
    );
}

#[test]
fn bracket_tags_only_count_first() {
    check(
        "{",
        " \n{\"name\": \"get_temperature\", \"arguments\": {\"city\": \"Tokyo\"}} trailing",
        " \n",
        &[("get_temperature", json!({"city": "Tokyo"}))],
    );
    let s = r#"Sure: {"name":"add","arguments":{}}"#;
    check("{", s, s, &[]);
    // `[` is not the `{` tag.
    let s = r#"[{"name":"add","arguments":{}}]"#;
    check("{", s, s, &[]);
    check(
        "[",
        r#"[{"name": "get_temperature", "arguments": {"city": "London"}}, {"name": "get_conditions", "arguments": {"location": "Tokyo"}}]]"#,
        "",
        &[
            ("get_temperature", json!({"city": "London"})),
            ("get_conditions", json!({"location": "Tokyo"})),
        ],
    );
    check("[", "[special delivery] ok", "[special delivery] ok", &[]);
    check(
        "{",
        "for { fmt.Println(\"hello\") }",
        "for { fmt.Println(\"hello\") }",
        &[],
    );
}

#[test]
fn bracket_values_without_a_call_are_content() {
    // Unknown tool: content once the value balances.
    let s = r#"{"name": "search", "arguments": {"q": "x"}} more"#;
    check("{", s, s, &[]);
    // The first value decides, even when a call follows it.
    let s = r#"{"name": "jeff"} {"name": "add", "arguments": {}}"#;
    check("{", s, s, &[]);
    // Cut off at the end: content when no call was found ...
    let s = r#"{"name": "get_temperature", "arguments": {"#;
    check("{", s, s, &[]);
    let s = r#"[{"name": "search", "arguments": {}}"#;
    check("[", s, s, &[]);
    // ... dropped after one.
    check(
        "[",
        r#"[{"name": "add", "arguments": {}}, {"name": "get_conditions", "#,
        "",
        &[("add", json!({}))],
    );
}

#[test]
fn ids_are_call_and_eight_lowercase_alphanumerics() {
    let r = run(&mut parser("{"), &[r#"{"name":"add","arguments":{}}"#]);
    let id = &r.tool_calls[0].id;
    assert_eq!(id.len(), 13);
    assert!(id.starts_with("call_"));
    assert!(id[5..]
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
}

#[test]
fn partial_tag_is_held_back_then_released() {
    let mut p = parser("<tool_call>");
    assert_eq!(p.add("a <tool", false).content, "a ");
    assert_eq!(p.add("box> b", true).content, "<toolbox> b");
}

#[test]
fn find_arguments_facts() {
    let f = |s: &str| find_arguments("get_temperature", s).and_then(|(a, _)| a);
    assert_eq!(
        f(r#"{"format": "f"}}"#),
        json!({"format": "f"}).as_object().cloned()
    );
    assert_eq!(f(r#"{format: f}"#), None);
    assert_eq!(f(r#"{"a": 1"#), None);
    assert_eq!(
        f(r#"{"get_temperature": "{\"a\": 1}"}"#),
        json!({"a": 1}).as_object().cloned()
    );
    assert_eq!(
        f(r#""arguments": {"location": "Tokyo"}}</tool_call>"#),
        json!({"location": "Tokyo"}).as_object().cloned()
    );
    assert_eq!(
        f(r#"{"name": "path", "arguments": {"dir": "C:\\{App}\\"}}"#),
        json!({"dir": "C:\\{App}\\"}).as_object().cloned()
    );
    // An invalid object is skipped for the next one.
    assert_eq!(f(r#"{x} {"b": 2}"#), json!({"b": 2}).as_object().cloned());
    assert_eq!(f(r#"{"name": "x", "arguments": "null"}"#), None);
}
