//! Tests of the Qwen3-Coder call reading and value typing shared by the qwen3-coder, Nemotron 3
//! and Qwen 3.5 parsers.

use super::*;
use serde_json::json;

fn schema(props: J) -> Vec<J> {
    vec![
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": props}}}),
    ]
}

#[test]
fn attribute_values_read_as_gos_strict_decoder() {
    let cases = [
        ("plain", Some("plain")),
        ("a&amp;b&lt;&gt;&quot;&apos;", Some("a&b<>\"'")),
        ("&#65;&#x42;&#x1F600;", Some("AB😀")),
        ("a\r\nb\rc", Some("a\nb\nc")),
        ("&#xD800;", Some("\u{FFFD}")),
        ("a&b", None),
        ("&nbsp;", None),
        ("&#X41;", None),
        ("&#;", None),
        ("&#1;", None),
        ("&#x110000;", None),
        ("a<b", None),
    ];
    for (raw, want) in cases {
        assert_eq!(attr_value(raw).as_deref(), want, "{raw:?}");
    }
    // Rewritten names round-trip through Ollama's escaping.
    let s = "a\"b'c&<\t\n\r\u{1}";
    assert_eq!(
        attr_value(&escape_attr(s)).unwrap(),
        "a\"b'c&<\t\n\r\u{FFFD}"
    );
}

#[test]
fn decode_errors_name_what_go_rejects() {
    let cases = [
        ("", "EOF"),
        ("</function>", "unexpected end element </function>"),
        (
            "<parameter=a></parameter>",
            "expected element type <function> but have <parameter>",
        ),
        (
            "<function=f><parameter=a></function>",
            "element <parameter> closed by </function>",
        ),
        ("<function=f>", "unexpected EOF"),
        (
            "\u{B}<function=f></function>",
            "illegal character code U+000B",
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(decode(raw), Err(want.to_string()), "{raw:?}");
    }
    let ok = decode("x<function=f><parameter=a>1</parameter></function>\u{0}").unwrap();
    assert_eq!(
        (ok.name.as_str(), ok.params.len()),
        ("f", 1),
        "after the root is unread"
    );
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
        let (n, a) = call(raw, &[]).unwrap_or_else(|| panic!("{raw:?}"));
        assert_eq!((n.as_str(), J::Object(a.clone())), (name, args), "{raw:?}");
    }
    let (_, a) = call(
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
        ("n", "inf", json!(i64::MIN)),
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
        let (_, args) = call(&raw, &schema(props.clone())).unwrap();
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
    assert_eq!(call(raw, &schema(props)).unwrap().1["i"], json!("5"));
}

#[test]
fn values_are_typed_as_ollama_types_them() {
    let cases: &[(&str, &[&str], J)] = &[
        ("5", &["integer"], json!(5)),
        ("+5", &["integer"], json!(5)),
        (" 5", &["integer"], json!(" 5")),
        ("1.5", &["integer"], json!("1.5")),
        ("1.5", &["integer", "number"], json!(1.5)),
        ("2.0", &["number"], json!(2)),
        ("1e3", &["number"], json!(1000)),
        ("-0.25", &["number"], json!(-0.25)),
        ("1e400", &["number"], json!("1e400")),
        ("abc", &["number"], json!("abc")),
        ("abc", &["integer", "string"], json!("abc")),
        ("TRUE", &["boolean"], json!(true)),
        ("yes", &["boolean"], json!(false)),
        ("yes", &["boolean", "string"], json!("yes")),
        ("Null", &["string"], json!(null)),
        ("null", &[], json!(null)),
        (
            "[1, {\"b\":1,\"a\":2}]",
            &["array"],
            json!([1, {"a": 2, "b": 1}]),
        ),
        ("{}", &["array"], json!("{}")),
        ("{\"z\":1}", &["array", "object"], json!({"z": 1})),
        (" null ", &["object"], json!(null)),
        ("\nx\n", &[], json!("\nx\n")),
        ("\n\nx\n\n", &[], json!("\n\nx\n\n")),
        ("7", &["string"], json!("7")),
        ("7", &[], json!("7")),
        ("42", &["boolean", "number"], json!(42)),
        (
            "9223372036854775808",
            &["integer"],
            json!("9223372036854775808"),
        ),
        ("1e20", &["number"], json!(i64::MIN)),
    ];
    for (raw, types, want) in cases {
        let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
        // As a parameter's text arrives: between the newlines after and before the tags.
        assert_eq!(
            &typed_value(&format!("\n{raw}\n"), &types),
            want,
            "{raw:?} {types:?}"
        );
    }
}

#[test]
fn calls_decode_as_gos_xml_reader_does() {
    let cases = [
        ("<function name=\"a&amp;b&#x41;&#66;&lt;\"><parameter name=\"q&quot;\">v</parameter></function>", Some(("a&bAB<", json!({"q\"": "v"})))),
        ("lead <function=f><parameter=x>a<parameter=y>inner</parameter>b</parameter><function=g>z</function></function> tail", Some(("f", json!({"x": "ab"})))),
        ("<function=f><parameter=x>a\r\nb\rc</parameter></function>", Some(("f", json!({"x": "a\nb\nc"})))),
        ("<function=f><parameter=x>v=<a=b\"c> &amp; <b></parameter></function>", Some(("f", json!({"x": "v=<a name=\"b&#34;c\"> &amp; <b>"})))),
        ("<function=f><parameter=x>1</parameter><parameter=y>2</parameter><parameter=x>3</parameter><parameter>anon</parameter></function>", Some(("f", json!({"x": "3", "y": "2", "": "anon"})))),
        ("<function=a b\tc\nd\u{2}e'\"></function>", Some(("a b\tc\nd\u{fffd}e'\"", json!({})))),
        ("<function=f></function>\u{1} <broken", Some(("f", json!({})))),
        ("<function></function>", Some(("", json!({})))),
        ("<function=f><parameter=x>a</function>", None),
        ("<parameter=x>a</parameter>", None),
        ("", None),
        ("{\"name\": \"f\"}", None),
        ("<function=f><parameter=x>\u{1}</parameter></function>", None),
        ("<function=f></function name=\"x\">", None),
        ("<function name=\"a&bogus;\"></function>", None),
        ("<function name=\"a<b\"></function>", None),
        ("<function name=\"a&#0;b\"></function>", None),
        ("<function=f><parameter=x>a</parameter>", None),
    ];
    for (raw, want) in cases {
        let got = call(raw, &[]);
        let got = got.map(|(name, args)| (name, J::Object(args)));
        let want = want.map(|(name, args): (&str, J)| (name.to_string(), args));
        assert_eq!(got, want, "{raw:?}");
    }
}
