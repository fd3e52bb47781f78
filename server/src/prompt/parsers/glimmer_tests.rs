//! Tests of the `glimmer` parser: every case is also checked for every chunking.

use super::*;
use crate::prompt::parsers::testutil::{every_split, run};
use serde_json::json;

fn tools() -> Vec<J> {
    vec![
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                "opt": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}}}}}),
        json!({"type": "function", "function": {"name": " read ", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}}}}}),
        json!({"type": "function", "function": {"name": "fs.write"}}),
    ]
}

type Calls = Vec<(String, J)>;

/// The one-shot result, checked against every chunking.
fn parse(o: &Options, s: &str) -> (String, String, Calls) {
    let strip = |p: Parsed| {
        let calls: Calls = p
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                assert_eq!(c.index, i as i64);
                assert!(c.id.starts_with("call_"));
                (c.name.clone(), J::Object(c.arguments.clone()))
            })
            .collect();
        (p.thinking, p.content, calls)
    };
    let want = strip(run(&mut Glimmer::new(o), &[s]));
    every_split(s, |chunks| {
        let got = strip(run(&mut Glimmer::new(o), chunks));
        assert_eq!(got, want, "{chunks:?}");
    });
    want
}

fn check(o: &Options, cases: Vec<(&str, &str, &str, Calls)>) {
    for (input, thinking, content, calls) in cases {
        assert_eq!(
            parse(o, input),
            (thinking.into(), content.into(), calls),
            "{input:?}"
        );
    }
}

fn atem(name: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<atem:function_calls>\n<atem:invoke name=\"{name}\">\n");
    for (k, v) in params {
        s.push_str(&format!(
            "<atem:parameter name=\"{k}\">{v}</atem:parameter>\n"
        ));
    }
    s + "</atem:invoke>\n</atem:function_calls>"
}

#[test]
fn messages_split_by_recipient() {
    let t = tools();
    let o = Options {
        schemas: &t,
        ..Default::default()
    };
    let weather = atem(
        "get_weather",
        &[
            ("city", "SF"),
            ("days", "3"),
            ("opt", "true"),
            ("x", "null"),
        ],
    );
    let sf = || {
        vec![(
            "get_weather".to_string(),
            json!({"city": "SF", "days": 3, "opt": true, "x": null}),
        )]
    };
    check(
        &o,
        vec![
            (
                " to=self<|message|>Need data.<|eom|><|start|>assistant to=user<|message|>It is 65F.<|eot|>",
                "Need data.",
                "It is 65F.",
                vec![],
            ),
            ("<|message|>plain<|eot|>", "", "plain", vec![]),
            ("<|start|>assistant to=user<|message|>x <|sta", "", "x <|sta", vec![]),
            ("no header at all", "", "no header at all", vec![]),
            ("<|start|>assis", "", "<|start|>assis", vec![]),
            (
                &format!(" to=get_weather<|message|>{weather}<|eot|>"),
                "",
                "",
                sf(),
            ),
            // An end marker before the block's end does not end a call.
            (
                &format!(" to=get_weather<|message|><|eot|>{weather}\n<|eom|>after"),
                "",
                &format!("<|eot|>{weather}\nafter"),
                vec![],
            ),
            (
                &format!(" to=read.read<|message|>{}<|eot|>", atem("read", &[("path", " a ")])),
                "",
                "",
                vec![("read".into(), json!({"path": " a "}))],
            ),
            // The invoke must name the recipient's tool; Go fails, herd gives the body.
            (
                &format!(" to=get_weather<|message|>{}<|eot|>", atem("read", &[])),
                "",
                &atem("read", &[]),
                vec![],
            ),
            (
                " to=fs.write<|message|><atem:function_calls>\n<atem:invoke name=\"fs.write<|message|><atem:parameter name=\"a\">1</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
                "",
                "",
                vec![("fs.write".into(), json!({"a": "1"}))],
            ),
            (
                &format!(" to=self<|message|>think<|start|>assistant to=get_weather<|message|>{weather}"),
                "think",
                "",
                sf(),
            ),
            (
                " to=user<|message|>a<|start|>assistant to=bogus<|message|>b<|start|>assistant to=my tool<|message|>c<|eot|>",
                "",
                "a<|start|>assistant to=bogus<|message|>b<|start|>assistant to=my tool<|message|>c",
                vec![],
            ),
            (
                " to=user<|message|>a<|start|>tool x<|message|>b<|start|>assistant<|message|>c",
                "",
                "a<|start|>tool x<|message|>bc",
                vec![],
            ),
        ],
    );
}

#[test]
fn content_that_is_a_call() {
    let t = tools();
    let o = Options {
        schemas: &t,
        ..Default::default()
    };
    let block = atem("get_weather", &[("city", "Oslo")]);
    let oslo = || vec![("get_weather".to_string(), json!({"city": "Oslo"}))];
    check(
        &o,
        vec![
            (
                &format!(" to=user<|message|>\n {block}\n<|eot|>"),
                "",
                "",
                oslo(),
            ),
            (&format!("<|message|>{block}"), "", "", oslo()),
            (
                &format!(" to=functions<|message|>{block} and more<|eot|>"),
                "",
                &format!("{block} and more"),
                vec![],
            ),
            (
                &format!(" to=user<|message|>x{block}<|eot|>"),
                "",
                &format!("x{block}"),
                vec![],
            ),
            (
                &format!(" to=user<|message|>{}<|eot|>", atem("nope", &[])),
                "",
                &atem("nope", &[]),
                vec![],
            ),
        ],
    );
    // Without tools nothing is held or read as a call.
    let o = Options::default();
    check(
        &o,
        vec![(
            &format!(" to=user<|message|>{block}<|eot|>"),
            "",
            &block,
            vec![],
        )],
    );
}

#[test]
fn thinking_follows_think() {
    let off = Think::Bool(false);
    let o = Options {
        think: Some(&off),
        ..Default::default()
    };
    check(
        &o,
        vec![(
            " to=self<|message|>hidden<|eom|><|start|>assistant to=user<|message|>shown",
            "",
            "shown",
            vec![],
        )],
    );
    assert_eq!(Glimmer::new(&o).thinking_close(), ["to=user<|message|>"]);
}

#[test]
fn content_streams_before_the_message_ends() {
    let t = tools();
    let o = Options {
        schemas: &t,
        ..Default::default()
    };
    let mut p = Glimmer::new(&o);
    assert_eq!(p.add(" to=user", false), Parsed::default());
    assert_eq!(p.add("<|message|>Hel", false).content, "Hel");
    assert_eq!(p.add("lo<|e", false).content, "lo");
    assert_eq!(p.add("ot|><|start|>", false), Parsed::default());
    assert_eq!(p.add("assistant to=se", false), Parsed::default());
    assert_eq!(p.add("lf<|message|>hm", true).thinking, "hm");
    let mut p = Glimmer::new(&o);
    assert_eq!(
        p.add("<|message|> <atem:function", false),
        Parsed::default()
    );
    assert_eq!(p.add("s>", false).content, " <atem:functions>");
}
