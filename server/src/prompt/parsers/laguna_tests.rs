//! Tests of the `laguna` / `poolside-v1` parsers: every case is also checked for every chunking.

use super::*;
use crate::prompt::parsers::testutil::{every_split, run};
use crate::prompt::Message;
use serde_json::{json, Map};

fn tools() -> Vec<J> {
    vec![
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}}),
        json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}}}}}),
        json!({"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
            "properties": {"command": {"type": "string"}}}}}),
    ]
}

type Calls = Vec<(String, Map<String, J>)>;

/// The one-shot result, checked against every chunking.
fn parse(o: &Options, v8: bool, s: &str) -> (String, String, Calls) {
    let strip = |p: Parsed| {
        let calls: Calls = p
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                assert_eq!(c.index, i as i64);
                assert!(c.id.starts_with("call_"));
                (c.name.clone(), c.arguments.clone())
            })
            .collect();
        (p.thinking, p.content, calls)
    };
    let want = strip(run(&mut Laguna::new(o, v8), &[s]));
    every_split(s, |chunks| {
        let got = strip(run(&mut Laguna::new(o, v8), chunks));
        assert_eq!(got, want, "{chunks:?}");
    });
    want
}

fn call(name: &str, args: J) -> (String, Map<String, J>) {
    (name.into(), args.as_object().cloned().unwrap())
}

type Case = (&'static str, &'static str, &'static str, Calls);

fn check(o: &Options, v8: bool, cases: Vec<Case>) {
    for (input, thinking, content, calls) in cases {
        let got = parse(o, v8, input);
        assert_eq!(got, (thinking.into(), content.into(), calls), "{input:?}");
    }
}

#[test]
fn thinking_on_starts_in_thinking() {
    let on = Think::Bool(true);
    let t = tools();
    let o = Options {
        think: Some(&on),
        schemas: &t,
        ..Default::default()
    };
    check(
        &o,
        false,
        vec![
            ("\nReasoning here.\n</think>\nThe answer.", "Reasoning here.", "The answer.", vec![]),
            ("  <think>Need lookup </think>Answer \n", "Need lookup", "Answer", vec![]),
            // Whitespace after an echoed <think> is kept (it comes as its own token).
            ("<think>\nplan</think>x", "\nplan", "x", vec![]),
            ("Direct answer.", "Direct answer.", "", vec![]),
            ("</think>\nTokyo\n", "", "Tokyo", vec![]),
            ("<thin", "<thin", "", vec![]),
            (
                "a <think> b</think>c <think>d</think> e",
                "a <think> bd",
                "c  e",
                vec![],
            ),
            (
                "plan <tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>SF</arg_value>\n</tool_call>",
                "plan",
                "",
                vec![call("get_weather", json!({"location": "SF"}))],
            ),
            ("Document literal <tool_c fakeout", "Document literal <tool_c fakeout", "", vec![]),
        ],
    );
    assert_eq!(Laguna::new(&o, false).thinking_close(), [THINK_CLOSE]);
}

#[test]
fn thinking_off_drops_think_blocks() {
    for think in [
        None,
        Some(Think::Bool(false)),
        Some(Think::Level("x".into())),
    ] {
        let o = Options {
            think: think.as_ref(),
            ..Default::default()
        };
        assert!(Laguna::new(&o, false).thinking_close().is_empty());
        check(
            &o,
            false,
            vec![
                (
                    "<think>Need to reason.</think>\nDirect answer.",
                    "",
                    "\nDirect answer.",
                    vec![],
                ),
                ("\n\nHello there.\n\n", "", "Hello there.", vec![]),
                ("</think>\nTokyo", "", "\nTokyo", vec![]),
                ("a </think> b", "", "a b", vec![]),
                ("a \n<think>x", "", "a \n", vec![]),
                (
                    "Document literal <think fakeout",
                    "",
                    "Document literal <think fakeout",
                    vec![],
                ),
                ("</think fakeout", "", "</think fakeout", vec![]),
                // Without tools, <user> blocks and JSON are content.
                (
                    "<user>get_weather</user>",
                    "",
                    "<user>get_weather</user>",
                    vec![],
                ),
                ("{\"name\":\"f\"}", "", "{\"name\":\"f\"}", vec![]),
            ],
        );
    }
}

#[test]
fn calls_in_content() {
    let t = tools();
    let o = Options {
        schemas: &t,
        ..Default::default()
    };
    check(
        &o,
        false,
        vec![
            (
                "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
                "",
                "",
                vec![call("get_weather", json!({"location": "Paris", "days": 3}))],
            ),
            (
                "Use <tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>x</arg_value>\n</tool_call> ok ",
                "",
                "Use ok",
                vec![call("get_weather", json!({"days": "x"}))],
            ),
            (
                "Let me call the weather tool.\n{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Paris\"}}",
                "",
                "Let me call the weather tool.",
                vec![call("get_weather", json!({"location": "Paris"}))],
            ),
            (
                "{\"name\":\"read_file\",\"arguments\":{\"path\":\"a, b\"}}\n\nDone.",
                "",
                "\n\nDone.",
                vec![call("read", json!({"path": "a, b"}))],
            ),
            (
                "<user>get_weather\n<arg_key>location</arg_key>\n<arg_value>San Francisco, CA</arg_value>\n</user>",
                "",
                "",
                vec![call("get_weather", json!({"location": "San Francisco, CA"}))],
            ),
            (
                "I'll run git diff for you. <user>\n{\"name\":\"bash\",\"arguments\":{\"command\":\"git diff\"}}\n</user>",
                "",
                "I'll run git diff for you.",
                vec![call("bash", json!({"command": "git diff"}))],
            ),
            ("<user>hello</user> there", "", "<user>hello</user> there", vec![]),
            // A complete object that is not a call is content (Go fails the request).
            ("Text {x} and {\"a\": 1} more", "", "Text {x} and {\"a\": 1} more", vec![]),
            (
                "<tool_call>{\"arguments\":{}}</tool_call>",
                "",
                "<tool_call>{\"arguments\":{}}</tool_call>",
                vec![],
            ),
            ("<tool_call>get_weather\n{\"a\": 1", "", "<tool_call>get_weather\n{\"a\": 1", vec![]),
            ("<tool_call>  \n", "", "", vec![]),
            ("<tool_call>read", "", "", vec![call("read", json!({}))]),
            // Cut short by another tag, a JSON object or <user> block is content.
            (
                "x {\"name\": \"f\" <tool_call>get_weather</tool_call>",
                "",
                "x {\"name\": \"f\"",
                vec![call("get_weather", json!({}))],
            ),
            ("{\"a\": <think>t</think>z", "", "{\"a\": z", vec![]),
            ("<user>read\n<think>t</think>z", "", "<user>read\nz", vec![]),
            ("<user>read <tool_call>bash</tool_call>", "", "<user>read", vec![call("bash", json!({}))]),
            (
                "{\"a\": 1 <user>read</user>",
                "",
                "{\"a\": 1",
                vec![call("read", json!({}))],
            ),
            // A <user> block that is not a call is read again as content.
            (
                "<user>\n{\"name\":\"nope\",\"arguments\":{}}\n</user> after\n",
                "",
                "<user>{\"name\":\"nope\",\"arguments\":{}}\n</user> after",
                vec![],
            ),
            // Unfinished at the end: Go reads the text for a call once more.
            (
                "<user>\n{\"name\":\"read\",\"arguments\":{\"path\":\"x\"}}",
                "",
                "<user>",
                vec![call("read", json!({"path": "x"}))],
            ),
            ("<user>read\n", "", "<user>read", vec![]),
            ("\n{\"name\": \"get_weather\", \"arguments\": {", "", "{\"name\": \"get_weather\", \"arguments\": {", vec![]),
            ("{\"t\": 15:30} then {\"name\": \"read\"}", "", "{\"t\": 15:30} then {\"name\": \"read\"}", vec![]),
            ("Document literal <tool_call fakeout", "", "Document literal <tool_call fakeout", vec![]),
            ("a {\"x\": \"}\"} b", "", "a {\"x\": \"}\"} b", vec![]),
        ],
    );
}

#[test]
fn prefill_continues_in_content_for_laguna_only() {
    let on = Think::Bool(true);
    let t = tools();
    let prefill = Message {
        thinking: Some("earlier".into()),
        ..Message::new("assistant", "")
    };
    let o = Options {
        think: Some(&on),
        last: Some(&prefill),
        schemas: &t,
        ..Default::default()
    };
    assert!(Laguna::new(&o, false).thinking_close().is_empty());
    check(
        &o,
        false,
        vec![
            (" 42.", "", "42.", vec![]),
            (
                "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
                "",
                "",
                vec![call("get_weather", json!({"location": "Paris"}))],
            ),
            ("<think>more</think>x", "more", "x", vec![]),
        ],
    );
    assert_eq!(Laguna::new(&o, true).thinking_close(), [THINK_CLOSE]);
    check(
        &o,
        true,
        vec![("Reasoning.</think>Answer.", "Reasoning.", "Answer.", vec![])],
    );
    // A user message last is no prefill.
    let user = Message::new("user", "hi");
    let o = Options {
        think: Some(&on),
        last: Some(&user),
        ..Default::default()
    };
    check(
        &o,
        false,
        vec![("Direct answer.", "Direct answer.", "", vec![])],
    );
}

#[test]
fn streaming_holds_back_only_possible_tags() {
    let t = tools();
    let o = Options {
        schemas: &t,
        ..Default::default()
    };
    let mut p = Laguna::new(&o, false);
    assert_eq!(
        p.add("I'll read the file.<us", false).content,
        "I'll read the file."
    );
    let r = p.add(
        "er>read\n<arg_key>path</arg_key>\n<arg_value>/a</arg_value>\n</user>",
        true,
    );
    assert_eq!((r.content.as_str(), r.tool_calls.len()), ("", 1));
    let mut p = Laguna::new(&o, false);
    assert_eq!(
        p.add("{\"name\":\"read\",\"arguments\":{\"path\":\"a,", false),
        Parsed::default()
    );
    assert_eq!(p.add(" b\"}}", false).tool_calls.len(), 1);
    let mut p = Laguna::new(&o, false);
    assert_eq!(p.add("Plain text {", false).content, "Plain text");
    assert_eq!(p.add("x} more ", false).content, " {x} more");
}
