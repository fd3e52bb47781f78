//! Tests of the Qwen3-Coder style tool calls the Nemotron parser reads.

use super::*;
use crate::prompt::parsers::testutil::every_split;
use serde_json::json;

fn run(schemas: &[J], chunks: &[&str]) -> Parsed {
    let mut p = XmlCalls::new(schemas);
    let mut out = Parsed::default();
    for (i, c) in chunks.iter().enumerate() {
        p.add(c, i + 1 == chunks.len(), &mut out);
    }
    out
}

fn call(name: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<tool_call>\n<function={name}>\n");
    for (k, v) in params {
        s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
    }
    s + "</function>\n</tool_call>"
}

fn schema(props: J) -> Vec<J> {
    vec![
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": props}}}),
    ]
}

#[test]
fn content_and_calls_under_every_split() {
    let s = format!(
        "I'll check. \n{}\n\n  Then more.  {}  tail \n",
        call("search", &[("query", "test query"), ("n", "2")]),
        call("now", &[])
    );
    every_split(&s, |chunks| {
        let r = run(&[], chunks);
        assert_eq!(r.content, "I'll check.Then more.tail", "{chunks:?}");
        let got: Vec<(&str, i64, J)> = r
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), c.index, J::Object(c.arguments.clone())))
            .collect();
        assert_eq!(
            got,
            [
                ("search", 0, json!({"query": "test query", "n": "2"})),
                ("now", 1, json!({}))
            ],
            "{chunks:?}"
        );
        assert!(r.tool_calls.iter().all(|c| c.id.starts_with("call_")));
    });
}

#[test]
fn held_text_at_the_end_is_not_delivered() {
    for (s, content) in [
        ("answer <tool_ca", "answer"),
        ("answer\n\n", "answer"),
        ("answer <tool_call>\n<function=f>\n", "answer"),
        ("<tool_cal> x", "<tool_cal> x"),
    ] {
        every_split(s, |chunks| {
            let r = run(&[], chunks);
            assert_eq!(r.content, content, "{chunks:?}");
            assert!(r.tool_calls.is_empty());
        });
    }
}

#[test]
fn undecodable_calls_stay_content() {
    for raw in [
        "\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
        "\n<parameter=a>\n1\n</parameter>\n",
        "\n<function=f>\n<parameter=a>\n1\n</function>\n",
        "\n<function=f>\n<parameter=a>\nbell\u{7}\n</parameter>\n</function>\n",
        "</parameter><function=f></function>",
        "<function name=\"a&b\"></function>",
        "<function=f></function name=\"x\">",
    ] {
        let s = format!("x{OPEN}{raw}{CLOSE}y");
        let r = run(&[], &[&s]);
        assert!(r.tool_calls.is_empty(), "{raw:?}");
        assert_eq!(r.content, format!("x{OPEN}{raw}{CLOSE}y"), "{raw:?}");
    }
}

#[test]
fn xml_reading_follows_go() {
    let cases: Vec<(&str, &str, J)> = vec![
        // Text before the element is skipped, after it ignored (even a control character).
        ("junk <function=f><parameter=a>1</parameter></function>\u{1} <x", "f", json!({"a": "1"})),
        // Other <word=value> tags in a value are rewritten, not parsed.
        ("<function=f><parameter=a>\n<b=\"c\"> & <d>\n</parameter></function>", "f", json!({"a": "<b name=\"&#34;c&#34;\"> & <d>"})),
        // Carriage returns become newlines in text, not in names.
        ("<function=f><parameter=a\rb>x\r\ny\rz</parameter></function>", "f", json!({"a\rb": "x\ny\nz"})),
        // Nested elements are skipped, the text around them kept; later duplicates win in place.
        ("<function=f><parameter=a>1<parameter=z>2</parameter>3</parameter><parameter=b>4</parameter><parameter=a>5</parameter><function>x</function></function>", "f", json!({"a": "5", "b": "4"})),
        // The literal XML form and a nameless function.
        ("<function name=\"g h\"><parameter\nname=\"k\">v</parameter></function>", "g h", json!({"k": "v"})),
        ("<function></function>", "", json!({})),
        // Only one leading and one trailing newline go.
        ("<function=f><parameter=a>\n\nx\n\n</parameter></function>", "f", json!({"a": "\nx\n"})),
    ];
    for (raw, name, args) in cases {
        let (n, a) = parse_call(raw, &[]).unwrap_or_else(|| panic!("{raw:?}"));
        assert_eq!((n.as_str(), J::Object(a.clone())), (name, args), "{raw:?}");
    }
    let (_, a) = parse_call(
        "<function=f><parameter=z>1</parameter><parameter=a>2</parameter></function>",
        &[],
    )
    .unwrap();
    assert_eq!(a.keys().collect::<Vec<_>>(), ["z", "a"]);
}

#[test]
fn values_are_typed_by_the_schema() {
    let props = json!({
        "b": {"type": "boolean"}, "i": {"type": "integer"}, "n": {"type": "number"},
        "arr": {"type": "array"}, "obj": {"type": "object"}, "s": {"type": "string"},
        "u": {"type": ["string", "number"]}, "any": {"anyOf": [{"type": "integer"}, {"type": ["boolean"]}]},
        "bi": {"type": ["boolean", "integer"]},
    });
    let cases = [
        ("b", "TRUE", json!(true)),
        ("b", "yes", json!(false)),
        ("i", "-42", json!(-42)),
        ("i", "4.5", json!("4.5")),
        ("n", "3.0", json!(3)),
        ("n", "2.5", json!(2.5)),
        ("n", "1e20", json!(i64::MIN)),
        ("n", "abc", json!("abc")),
        ("n", "inf", json!("inf")),
        (
            "arr",
            "[1, {\"z\": 1, \"a\": 2}]",
            json!([1, {"a": 2, "z": 1}]),
        ),
        ("arr", "{}", json!("{}")),
        ("arr", " null", json!(null)),
        (
            "obj",
            "{\"z\": 1, \"a\": [true]}",
            json!({"a": [true], "z": 1}),
        ),
        ("obj", "[1]", json!("[1]")),
        ("s", "Null", json!(null)),
        ("s", "123", json!("123")),
        ("u", "123", json!(123)),
        ("u", "hello", json!("hello")),
        ("any", "7", json!(7)),
        ("any", "false", json!(false)),
        ("any", "x", json!("x")),
        ("bi", "12", json!(12)),
        ("unknown", "12", json!("12")),
    ];
    for (key, value, want) in cases {
        let raw = format!("<function=f>\n<parameter={key}>\n{value}\n</parameter>\n</function>");
        let (_, args) = parse_call(&raw, &schema(props.clone())).unwrap();
        assert_eq!(args[key], want, "{key}={value}");
        // Keys sort inside decoded objects.
        if key == "obj" && value.starts_with('{') {
            assert_eq!(
                args[key].as_object().unwrap().keys().collect::<Vec<_>>(),
                ["a", "z"]
            );
        }
    }
    // Another tool's schema does not apply.
    let raw = "<function=g><parameter=i>5</parameter></function>";
    assert_eq!(parse_call(raw, &schema(props)).unwrap().1["i"], json!("5"));
}
