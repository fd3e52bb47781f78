//! The Qwen 3.5 output parser (Ollama's `Qwen35Parser`, parser names `qwen3.5` and `ornith`): the
//! Qwen 3 machine ([`super::qwen3`]) with XML tool calls, as Ollama's `Qwen3CoderParser` reads
//! them after the thinking:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Thinking is on unless `think` is false, and off when the response continues an assistant
//! prefill with content. A parameter's value (less one leading and one trailing newline) is typed
//! by the tool's schema for that parameter ([`typed`]). Ollama reads the call by rewriting
//! `<name=value>` tags to XML and decoding that with Go's `encoding/xml`; [`xml_call`] follows that
//! decoding's outcome: text before `<function>` and after its end is ignored, other tags in a
//! value are text, `\r\n` reads as `\n`, and unbalanced tags or characters XML forbids make it no
//! call (then the text is content; see [`super::qwen3`]).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value as J};

use super::qwen3::{go_any, go_number, CallFormat, QwenParser};
use super::Options;
use crate::prompt::Think;

/// The parser for `qwen3.5` / `ornith`.
pub fn parser(o: &Options) -> QwenParser {
    let prefill = o
        .last
        .is_some_and(|m| m.role == "assistant" && !m.content.is_empty());
    let on = o.think.is_none_or(Think::enabled) && !prefill;
    QwenParser::new(CallFormat::Xml, on, o.schemas)
}

/// `<word=value>` tags, which Ollama rewrites to `<word name="value">`.
static EQ_TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<([0-9A-Za-z_]+)=([^>]+)>").expect("constant pattern"));
/// The tags that stay XML elements after that rewrite; all other text is character data.
static XML_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"<(/?)(function|parameter)(?:[\t\n\x0C\r ]+name="([^"]*)")?>"#)
        .expect("constant pattern")
});

/// Characters XML allows (Go's `isInCharacterRange`).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Go's `xml.EscapeText`, as Ollama escapes a rewritten tag's value into its `name` attribute.
fn escape_attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            c if !xml_char(c) => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `\r\n` and `\r` as Go's XML decoder reads them: `\n`.
fn newlines(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// Character data as Go's decoder reads it ([`newlines`]); `None` on a character XML forbids.
fn char_data(s: &str) -> Option<String> {
    let s = newlines(s);
    s.chars().all(xml_char).then_some(s)
}

/// An attribute value as Go's decoder reads it: entities decoded, `<` refused, [`newlines`],
/// and the result checked for characters XML forbids.
fn attr_value(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['&', '<']) {
        out.push_str(&newlines(&rest[..i]));
        if rest[i..].starts_with('<') {
            return None;
        }
        let end = rest[i..].find(';')? + i;
        out.push(entity(&rest[i + 1..end])?);
        rest = &rest[end + 1..];
    }
    out.push_str(&newlines(rest));
    out.chars().all(xml_char).then_some(out)
}

/// The character an XML entity (`lt`, `#65`, `#x41`, …) stands for.
fn entity(name: &str) -> Option<char> {
    let n = match name {
        "lt" => return Some('<'),
        "gt" => return Some('>'),
        "amp" => return Some('&'),
        "apos" => return Some('\''),
        "quot" => return Some('"'),
        _ => match name.strip_prefix("#x") {
            Some(h) if !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()) => {
                u32::from_str_radix(h, 16).ok()?
            }
            Some(_) => return None,
            None => {
                let d = name.strip_prefix('#')?;
                if d.is_empty() || !d.chars().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                d.parse().ok()?
            }
        },
    };
    // Go turns a surrogate's number into U+FFFD.
    (n <= 0x10FFFF).then(|| char::from_u32(n).unwrap_or('\u{FFFD}'))
}

enum Token<'a> {
    Text(&'a str),
    Open(&'a str, Option<&'a str>),
    Close(&'a str, bool),
}

/// The rewritten call as XML tokens (tags, and the text between them).
fn tokens(xml: &str) -> impl Iterator<Item = Token<'_>> {
    let mut at = 0;
    let mut tags = XML_TAG.captures_iter(xml).peekable();
    std::iter::from_fn(move || {
        let next = tags.peek().map(|c| c.get(0).map_or(0, |m| m.start()));
        match next {
            Some(start) if start > at => {
                let t = Token::Text(&xml[at..start]);
                at = start;
                Some(t)
            }
            Some(_) => {
                let c = tags.next()?;
                let whole = c.get(0)?;
                at = whole.end();
                let name = c.get(2).map_or("", |m| m.as_str());
                let attr = c.get(3).map(|m| m.as_str());
                Some(if c.get(1).is_some_and(|m| !m.is_empty()) {
                    Token::Close(name, attr.is_some())
                } else {
                    Token::Open(name, attr)
                })
            }
            None if at < xml.len() => {
                let t = Token::Text(&xml[at..]);
                at = xml.len();
                Some(t)
            }
            None => None,
        }
    })
}

/// Reads past the element `name` just opened (its content is not wanted), checking its nesting.
fn skip<'a>(toks: &mut impl Iterator<Item = Token<'a>>, name: &'a str) -> Option<()> {
    let mut open = vec![name];
    while let Some(last) = open.last().copied() {
        match toks.next()? {
            Token::Text(t) => {
                char_data(t)?;
            }
            Token::Open(n, attr) => {
                attr.map(attr_value).unwrap_or(Some(String::new()))?;
                open.push(n);
            }
            Token::Close(n, attr) if n == last && !attr => {
                open.pop();
            }
            Token::Close(..) => return None,
        }
    }
    Some(())
}

/// One call's text (between `<tool_call>` and `</tool_call>`) as Ollama's Qwen3-Coder parser
/// reads it: the function's name and its parameters in order, typed by `tools` (the request's
/// tools as sent). `None` where Ollama's XML decoding fails.
pub fn xml_call(raw: &str, tools: &[J]) -> Option<(String, Map<String, J>)> {
    let xml = EQ_TAG.replace_all(raw, |c: &regex::Captures| {
        format!("<{} name=\"{}\">", &c[1], escape_attr(&c[2]))
    });
    let mut toks = tokens(&xml);
    let attr = |a: Option<&str>| a.map_or(Some(String::new()), attr_value);
    // The root element: text before it is skipped, it must be <function>.
    let name = loop {
        match toks.next()? {
            Token::Text(t) => {
                char_data(t)?;
            }
            Token::Open("function", a) => break attr(a)?,
            Token::Open(..) | Token::Close(..) => return None,
        }
    };
    let tool = tools
        .iter()
        .find(|t| t.pointer("/function/name").and_then(J::as_str) == Some(name.as_str()));
    let mut arguments = Map::new();
    loop {
        match toks.next()? {
            Token::Text(t) => {
                char_data(t)?;
            }
            Token::Open("parameter", a) => {
                let param = attr(a)?;
                let mut value = String::new();
                loop {
                    match toks.next()? {
                        Token::Text(t) => value.push_str(&char_data(t)?),
                        Token::Open(n, a) => {
                            attr(a)?;
                            skip(&mut toks, n)?;
                        }
                        Token::Close("parameter", false) => break,
                        Token::Close(..) => return None,
                    }
                }
                let types = tool.map(|t| param_types(t, &param)).unwrap_or_default();
                arguments.insert(param, typed(&value, &types));
            }
            Token::Open(n, a) => {
                attr(a)?;
                skip(&mut toks, n)?;
            }
            Token::Close("function", false) => break,
            Token::Close(..) => return None,
        }
    }
    Some((name, arguments))
}

/// The JSON types a tool declares for a parameter (`type`, or every `anyOf` entry's).
fn param_types(tool: &J, param: &str) -> Vec<String> {
    let Some(p) = tool
        .pointer("/function/parameters/properties")
        .and_then(|p| p.get(param))
    else {
        return Vec::new();
    };
    let of = |p: &J| -> Vec<String> {
        match p.get("type") {
            Some(J::String(s)) => vec![s.clone()],
            Some(J::Array(a)) => a.iter().filter_map(J::as_str).map(String::from).collect(),
            _ => Vec::new(),
        }
    };
    match p.get("anyOf").and_then(J::as_array) {
        Some(any) if !any.is_empty() => any.iter().flat_map(of).collect(),
        _ => of(p),
    }
}

/// A parameter's value, less one leading and one trailing newline, typed as Ollama does: `null`
/// (any case) is null whatever the type; otherwise the first of boolean, integer, number, array,
/// object that the declared types allow and the text parses as, else the text. A value that
/// fails its only declared type is `false` for a boolean and the text for the others.
pub fn typed(raw: &str, types: &[String]) -> J {
    let raw = raw.strip_prefix('\n').unwrap_or(raw);
    let raw = raw.strip_suffix('\n').unwrap_or(raw);
    let lower = raw.to_lowercase();
    if lower == "null" {
        return J::Null;
    }
    let has = |t: &str| types.iter().any(|x| x == t);
    let only = types.len() == 1;
    let text = || J::String(raw.to_string());
    if has("boolean") {
        match lower.as_str() {
            "true" => return J::Bool(true),
            "false" => return J::Bool(false),
            _ if only => return J::Bool(false),
            _ => {}
        }
    }
    if has("integer") {
        match raw.parse::<i64>() {
            Ok(i) => return J::from(i),
            Err(_) if only => return text(),
            Err(_) => {}
        }
    }
    if has("number") {
        match go_float(raw) {
            Some(f) if f.fract() == 0.0 => {
                // Go converts with int64(f): out of range it is the minimum on amd64.
                let i = if f.abs() < 9.2e18 { f as i64 } else { i64::MIN };
                return J::from(i);
            }
            Some(f) => return go_number(f),
            None if only => return text(),
            None => {}
        }
    }
    for (t, want_array) in [("array", true), ("object", false)] {
        if has(t) {
            match serde_json::from_str::<J>(raw) {
                Ok(v @ J::Array(_)) if want_array => return go_any(v),
                Ok(v @ J::Object(_)) if !want_array => return go_any(v),
                Ok(J::Null) => return J::Null,
                _ if only => return text(),
                _ => {}
            }
        }
    }
    text()
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal text: finite values only (Go fails out of
/// range; its `inf`/`nan` spellings are not numbers a tool wants).
fn go_float(s: &str) -> Option<f64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if !digits.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil::{every_split, run};
    use crate::prompt::parsers::{for_model, support, Parser, Support};
    use crate::prompt::{Message, Template};
    use serde_json::json;

    fn weather() -> J {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer"}, "detail": {"type": "object"}}}}})
    }

    fn named(name: &str, think: Option<Think>, last: Option<&Message>) -> Box<dyn Parser> {
        let tools = [weather()];
        let o = Options {
            think: think.as_ref(),
            last,
            named: name,
            schemas: &tools,
            ..Options::default()
        };
        for_model(&Template::parse_go("{{ .Prompt }}").unwrap(), &o)
    }

    fn calls(r: &super::super::Parsed) -> Vec<(String, i64, J)> {
        let c = r.tool_calls.iter();
        c.map(|c| (c.name.clone(), c.index, J::Object(c.arguments.clone())))
            .collect()
    }

    #[test]
    fn thinking_then_a_call_typed_by_the_schema() {
        let s = "Plan.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=detail>\n{\"b\": [1, 2.5], \"a\": null}\n</parameter>\n</function>\n</tool_call>";
        for name in ["qwen3.5", "ornith"] {
            every_split(s, |chunks| {
                let r = run(named(name, None, None).as_mut(), chunks);
                assert_eq!((r.thinking.as_str(), r.content.as_str()), ("Plan.", ""));
                let args = json!({"city": "San Francisco", "days": 3, "detail": {"a": null, "b": [1, 2.5]}});
                assert_eq!(
                    calls(&r),
                    vec![("get_weather".into(), 0, args)],
                    "{chunks:?}"
                );
            });
        }
    }

    #[test]
    fn calls_among_content_and_inside_thinking() {
        let off = Some(Think::Bool(false));
        let s = "Two: <tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=days>\nsoon\n</parameter>\n</function>\n</tool_call>\n\nthen text";
        every_split(s, |chunks| {
            let r = run(named("ornith", off.clone(), None).as_mut(), chunks);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                ("", "Two:then text")
            );
            let want = vec![
                ("get_weather".into(), 0, json!({"city": "Oslo"})),
                ("get_weather".into(), 1, json!({"days": "soon"})),
            ];
            assert_eq!(calls(&r), want, "{chunks:?}");
        });
        // A call before </think> ends the thinking; a call that does not decode is content.
        let s = "hmm <tool_call><function=f></function></tool_call>ok <tool_call>{\"name\":\"f\"}</tool_call>";
        every_split(s, |chunks| {
            let r = run(named("qwen3.5", None, None).as_mut(), chunks);
            let content = "ok<tool_call>{\"name\":\"f\"}</tool_call>";
            assert_eq!((r.thinking.as_str(), r.content.as_str()), ("hmm", content));
            assert_eq!(calls(&r), vec![("f".into(), 0, json!({}))]);
        });
    }

    #[test]
    fn thinking_unless_off_or_continuing_a_prefill() {
        let prefill = Message::new("assistant", "The answer");
        let empty = Message::new("assistant", "");
        let cases = [
            (None, None, ("a", "b")),
            (Some(Think::Level("high".into())), None, ("a", "b")),
            (Some(Think::Bool(false)), None, ("", "a</think>b")),
            (None, Some(&prefill), ("", "a</think>b")),
            (None, Some(&empty), ("a", "b")),
        ];
        for (think, last, (thinking, content)) in cases {
            let mut p = named("qwen3.5", think, last);
            let close = if thinking.is_empty() {
                vec![]
            } else {
                vec!["</think>"]
            };
            assert_eq!(p.thinking_close(), close);
            let r = run(p.as_mut(), &["a</think>b"]);
            assert_eq!(
                (r.thinking.as_str(), r.content.as_str()),
                (thinking, content)
            );
        }
    }

    #[test]
    fn registered_with_ollamas_support() {
        let both = Support {
            tools: true,
            thinking: true,
        };
        for (name, want) in [
            ("qwen3.5", both),
            ("ornith", both),
            ("qwen3-thinking", both),
            (
                "qwen3",
                Support {
                    thinking: false,
                    ..both
                },
            ),
        ] {
            assert_eq!(support(name), Some(want), "{name}");
        }
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
                &typed(&format!("\n{raw}\n"), &types),
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
            let got = xml_call(raw, &[]);
            let got = got.map(|(name, args)| (name, J::Object(args)));
            let want = want.map(|(name, args): (&str, J)| (name.to_string(), args));
            assert_eq!(got, want, "{raw:?}");
        }
    }
}
