//! Tests of the `glimmer` renderer.

use super::*;
use crate::prompt::renderers::testutil::{assistant, call_id as call, m as msg};
use serde_json::json;

const DATE: &str = "2026-07-29";

fn r() -> Glimmer {
    Glimmer {
        date: Some(DATE.into()),
    }
}

fn weather() -> J {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
        "parameters": {"type": "object", "required": ["city"],
            "properties": {"city": {"type": "string", "description": "<City>"}, "units": {"type": "string"}}}}})
}

fn m(header: &str, body: &str, end: &str) -> String {
    format!("{START}{header}{MESSAGE}{body}{end}")
}

fn prompt(parts: &[String]) -> String {
    format!("{BOS}{}{START}assistant", parts.concat())
}

const RECIPIENTS: &str = "# Valid recipients: \"self\", \"user\".";

fn default_system(strength: &str) -> String {
    m(
        "system",
        &format!("You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04.\nCurrent date: {DATE}.\n\nReasoning strength: {strength}.\n\n{RECIPIENTS}"),
        EOT,
    )
}

#[test]
fn reasoning_strength_follows_think() {
    let user = [msg("user", "Hello")];
    let cases = [
        (None, "high"),
        (Some(Think::Bool(true)), "high"),
        (Some(Think::Bool(false)), "none"),
        (Some(Think::Level("low".into())), "low"),
        (Some(Think::Level("max".into())), "max"),
        (Some(Think::Level("bogus".into())), "none"),
    ];
    for (think, s) in cases {
        let want = prompt(&[default_system(s), m("user", "Hello", EOT)]);
        assert_eq!(r().render(&user, &[], think.as_ref()).unwrap(), want, "{s}");
    }
    assert_eq!(r().leading_bos(), BOS);
    let today = Glimmer { date: None }.render(&user, &[], None).unwrap();
    assert!(today.contains(&format!("Current date: {}.", super::today())));
}

#[test]
fn conversations_render_as_ollama() {
    let on = Think::Level("medium".into());
    let cases: Vec<(&str, Vec<Message>, Option<&Think>, String)> = vec![
        (
            "client system, images numbered across turns, thinking and answer",
            vec![
                msg("system", "Be concise."),
                Message {
                    images: 1,
                    ..msg("user", "Read this.")
                },
                assistant("It says hello.", Some("I should inspect it."), vec![]),
                Message {
                    images: 2,
                    ..msg("user", "And these?")
                },
            ],
            None,
            prompt(&[
                m(
                    "system",
                    &format!("Be concise.\n\nReasoning strength: high.\n\n{RECIPIENTS}"),
                    EOT,
                ),
                m("user", "[img-0] Read this.", EOT),
                m("assistant to=self", "I should inspect it.", EOM),
                m("assistant to=user", "It says hello.", EOT),
                m("user", "[img-1][img-2] And these?", EOT),
            ]),
        ),
        (
            "effort is renamed and a named strength is not repeated",
            vec![
                msg("system", "You are direct.\nReasoning effort: medium."),
                msg("user", "Hi"),
                msg("system", "REASONING EFFORT low"),
            ],
            Some(&on),
            prompt(&[
                m(
                    "system",
                    &format!("You are direct.\nReasoning strength: medium.\n\n{RECIPIENTS}"),
                    EOT,
                ),
                m("user", "Hi", EOT),
                m(
                    "system",
                    &format!("REASONING STRENGTH low\n\n{RECIPIENTS}"),
                    EOT,
                ),
            ]),
        ),
        (
            "thinking-only, empty and unknown-role messages",
            vec![
                msg("developer", "ignored"),
                assistant("", Some("hmm"), vec![]),
                assistant("", None, vec![]),
            ],
            None,
            prompt(&[
                default_system("high"),
                m("assistant to=self", "hmm", EOM),
                m("assistant to=user", "", EOT),
            ]),
        ),
    ];
    for (name, msgs, think, want) in cases {
        assert_eq!(r().render(&msgs, &[], think).unwrap(), want, "{name}");
    }
}

#[test]
fn calls_results_and_tools() {
    let args = json!({"city": "SF", "n": 1000000, "x": 3.5, "ok": true, "none": null,
        "list": ["héllo", 2], "obj": {"b": 2, "a": "<value>"}});
    let msgs = vec![
        msg("user", "Weather?"),
        assistant(
            "ignored",
            Some("Need data."),
            vec![
                call("call_w", "get_weather", args),
                call("call_r", "fs.read", json!({})),
            ],
        ),
        assistant("", None, vec![call("", "get_weather", json!({}))]),
        Message {
            tool_call_id: Some("call_w".into()),
            ..msg("tool", "{\"temp\":65}")
        },
        Message {
            tool_call_id: Some("missing".into()),
            ..msg("tool", "not found")
        },
        Message {
            tool_name: Some("fs.read".into()),
            tool_call_id: Some("call_w".into()),
            ..msg("tool", "README")
        },
        msg("tool", "orphan"),
    ];
    let tools = [
        weather(),
        json!({"type": "function", "function": {"name": "fs.read", "description": "Read <a> & b"}}),
        json!({"type": "function", "function": {"name": "fs.write"}}),
    ];
    let defs = format!(
        "{TOOLS_PREFIX}{{\"name\": \"get_weather\", \"description\": \"\"}}\n{{\"name\": \"fs\", \"description\": \"\"}}\n// Function schemas\
         \n{{\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {{\"type\": \"object\", \"required\": [\"city\"], \"properties\": {{\"city\": {{\"type\": \"string\", \"description\": \"\\u003cCity\\u003e\"}}, \"units\": {{\"type\": \"string\"}}}}}}}}\
         \n{{\"name\": \"fs.read\", \"description\": \"Read <a> & b\", \"parameters\": {{\"type\": \"\", \"properties\": null}}}}\
         \n{{\"name\": \"fs.write\", \"description\": \"\", \"parameters\": {{\"type\": \"\", \"properties\": null}}}}{TOOLS_SUFFIX}"
    );
    let system = format!("You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04.\nCurrent date: {DATE}.\n\nReasoning strength: high.\n\n{defs}\n\n# Valid recipients: \"self\", \"get_weather.*\", \"fs.*\", \"user\".");
    let weather_call = "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">SF</atem:parameter>\n<atem:parameter name=\"n\">1e+06</atem:parameter>\n<atem:parameter name=\"x\">3.5</atem:parameter>\n<atem:parameter name=\"ok\">true</atem:parameter>\n<atem:parameter name=\"none\">null</atem:parameter>\n<atem:parameter name=\"list\">[\"héllo\", 2]</atem:parameter>\n<atem:parameter name=\"obj\">{\"a\": \"<value>\", \"b\": 2}</atem:parameter>\n</atem:invoke>\n</atem:function_calls>";
    let empty = |name: &str| {
        format!("<atem:function_calls>\n<atem:invoke name=\"{name}\">\n</atem:invoke>\n</atem:function_calls>")
    };
    let result = |name: &str, body: &str| {
        m(
            &format!("tool {name}"),
            &format!("<tool_output name=\"{name}\">\n{body}\n</tool_output>"),
            EOT,
        )
    };
    let want = prompt(&[
        m("system", &system, EOT),
        m("user", "Weather?", EOT),
        m("assistant to=self", "Need data.", EOM),
        m("assistant to=get_weather", weather_call, EOM),
        // The next message is the assistant's too: the turn goes on.
        m("assistant to=fs.read", &empty("fs.read"), EOM),
        m("assistant to=get_weather", &empty("get_weather"), EOT),
        result("get_weather", "{\"temp\":65}"),
        result("missing", "not found"),
        result("fs.read", "README"),
        result("", "orphan"),
    ]);
    assert_eq!(r().render(&msgs, &tools, None).unwrap(), want);
}

#[test]
fn json_keeps_html_characters_but_not_line_separators() {
    assert_eq!(
        tojson(&json!({"a": "<b>&\u{2028}\\u003c", "z": [1.5, "x, y"]})),
        "{\"a\": \"<b>&\\u2028\\\\u003c\", \"z\": [1.5, \"x, y\"]}"
    );
}

#[test]
fn a_result_takes_the_name_of_the_last_call_with_its_id() {
    let msgs = vec![
        assistant("", None, vec![call("dup", "first", json!({}))]),
        assistant("", None, vec![call("dup", "second", json!({}))]),
        Message {
            tool_call_id: Some("dup".into()),
            ..msg("tool", "r")
        },
    ];
    assert_eq!(result_name(&msgs[2], &msgs), "second");
}
