//! A GLM tool call's body (`name<arg_key>k</arg_key><arg_value>v</arg_value>…`) as Ollama's
//! `parseGLM46ToolCall` reads it: the text is read as Go's `encoding/xml` would read
//! `<tool_call>` + body + `</tool_call>` once everything but the four argument tags is escaped
//! (so only those tags are markup); a body that is not well-formed is tried once more after
//! `repairGLM46XML` supplies missing tags. The function name is the body's own text (trimmed);
//! keys are trimmed; values lose one leading and one trailing newline and are typed by the
//! request's tool schema (`parseValue`, shared with Qwen3-Coder: [`typed_value`]).

use serde_json::{Map, Value as J};

use crate::prompt::parsers::qwen3coder_call::{property_types, typed_value};

const KEY_OPEN: usize = 0;
const KEY_CLOSE: usize = 1;
const TAGS: [&str; 4] = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"];

/// The arguments of a parsed call, in the model's key order.
pub type Call = (String, Map<String, J>);

/// The first argument tag in `s`: where, and which.
fn next_tag(s: &str) -> Option<(usize, usize)> {
    TAGS.iter()
        .enumerate()
        .filter_map(|(t, tag)| s.find(tag).map(|i| (i, t)))
        .min()
}

/// What Go's `xml.Unmarshal` puts in `GLMToolCallXML`.
#[derive(Debug, Default, PartialEq)]
struct Xml {
    /// Character data directly inside `<tool_call>`.
    content: String,
    keys: Vec<String>,
    values: Vec<String>,
}

/// `None` where Go reports a syntax error: a closing tag that does not match the open element,
/// an element left open, or a character XML forbids. Text of elements nested inside an argument
/// is skipped; `\r\n` and `\r` read as `\n`.
fn read_xml(s: &str) -> Option<Xml> {
    let mut x = Xml::default();
    let mut open: Vec<usize> = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    loop {
        let next = next_tag(rest);
        let chunk = next.map_or(rest, |(i, _)| &rest[..i]);
        if !chunk.chars().all(xml_char) {
            return None;
        }
        let chunk = chunk.replace("\r\n", "\n").replace('\r', "\n");
        match open.len() {
            0 => x.content.push_str(&chunk),
            1 => text.push_str(&chunk),
            _ => {}
        }
        let Some((i, tag)) = next else { break };
        rest = &rest[i + TAGS[tag].len()..];
        if tag.is_multiple_of(2) {
            if open.is_empty() {
                text.clear();
            }
            open.push(tag);
        } else {
            if open.pop() != Some(tag - 1) {
                return None;
            }
            if open.is_empty() {
                let v = std::mem::take(&mut text);
                if tag == KEY_CLOSE {
                    x.keys.push(v);
                } else {
                    x.values.push(v);
                }
            }
        }
    }
    open.is_empty().then_some(x)
}

/// XML 1.0's `Char` production (Go's `isInCharacterRange`).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Ollama's `repairGLM46XML`: walk the expected cycle `<arg_key>`, `</arg_key>`, `<arg_value>`,
/// `</arg_value>`, inserting whichever tags the model left out. Text before a first tag other
/// than `<arg_key>` is split at its first whitespace into the name and the first key.
fn repair(s: &str) -> String {
    let Some((at, first)) = next_tag(s) else {
        return s.to_string();
    };
    let mut out = String::with_capacity(s.len() + 32);
    let (prefix, mut s) = s.split_at(at);
    let mut phase = KEY_OPEN;
    match prefix.find(char::is_whitespace) {
        Some(sp) if first != KEY_OPEN => {
            out.push_str(&prefix[..sp]);
            out.push_str(TAGS[KEY_OPEN]);
            out.push_str(prefix[sp..].trim_start());
            phase = KEY_CLOSE;
        }
        _ => out.push_str(prefix),
    }
    while !s.is_empty() {
        let opening = phase.is_multiple_of(2);
        let Some((mut at, found)) = next_tag(s) else {
            // Text with no tag left: closed if an element is open, dropped otherwise.
            if !opening {
                out.push_str(s);
                out.push_str(TAGS[phase]);
                phase = (phase + 1) % 4;
            }
            break;
        };
        if found == phase {
            out.push_str(&s[..at]);
            out.push_str(TAGS[found]);
            s = &s[at + TAGS[found].len()..];
            phase = (phase + 1) % 4;
        } else if opening && at > 0 {
            // Text where an opening tag belongs: the tag was left out before it.
            out.push_str(TAGS[phase]);
            out.push_str(&s[..at]);
            s = &s[at..];
            phase += 1;
        } else {
            // Emit the tags missing between here and the one found (its text goes just before
            // the closing tag that precedes it).
            while phase != found {
                if phase % 2 == 1 && (phase + 1) % 4 == found && at > 0 {
                    out.push_str(&s[..at]);
                    s = &s[at..];
                    at = 0;
                }
                out.push_str(TAGS[phase]);
                phase = (phase + 1) % 4;
            }
        }
    }
    // Close a pair left open.
    if phase != KEY_OPEN {
        TAGS[phase..].iter().for_each(|t| out.push_str(t));
    }
    out
}

/// `parseGLM46ToolCall`: `None` is Go's error (unreadable even after repair, no name, or a key
/// without a value).
pub fn parse(raw: &str, schemas: &[J]) -> Option<Call> {
    let x = read_xml(raw).or_else(|| read_xml(&repair(raw)))?;
    build(x, schemas)
}

/// The end of the output inside an unclosed call (`finalizeToolCall`): no repair, the tool must
/// be one the request declares, every key non-empty and every required argument present.
pub fn parse_unclosed(raw: &str, schemas: &[J]) -> Option<Call> {
    let x = read_xml(raw)?;
    let tool = tool(schemas, x.content.trim())?;
    let keys: Vec<&str> = x.keys.iter().map(|k| k.trim()).collect();
    if keys.iter().any(|k| k.is_empty()) {
        return None;
    }
    let required = tool
        .pointer("/function/parameters/required")
        .and_then(J::as_array)
        .into_iter()
        .flatten()
        .filter_map(J::as_str);
    for r in required {
        if !keys.contains(&r) {
            return None;
        }
    }
    build(x, schemas)
}

fn tool<'a>(schemas: &'a [J], name: &str) -> Option<&'a J> {
    schemas
        .iter()
        .find(|t| t.pointer("/function/name").and_then(J::as_str) == Some(name))
}

fn build(x: Xml, schemas: &[J]) -> Option<Call> {
    let name = x.content.trim();
    if name.is_empty() || x.keys.len() != x.values.len() {
        return None;
    }
    let props = tool(schemas, name).and_then(|t| t.pointer("/function/parameters/properties"));
    let mut args = Map::new();
    for (k, v) in x.keys.iter().zip(&x.values) {
        let key = k.trim();
        let types = props
            .and_then(|p| p.get(key))
            .map(property_types)
            .unwrap_or_default();
        args.insert(key.to_string(), typed_value(v, &types));
    }
    Some((name.to_string(), args))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// The request's tools of the GLM tests (also the streaming ones in [`super::super`]).
    pub(in crate::prompt::parsers::glm) fn schemas() -> Vec<J> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "temp": {"type": "number"},
                "metric": {"type": "boolean"},
                "tags": {"type": "array"},
                "opts": {"type": "object"},
                "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "maybe": {"type": ["boolean", "string"]}}}}}),
        ]
    }

    fn args(body: &str) -> Option<(String, String)> {
        parse(body, &schemas()).map(|(n, a)| (n, J::Object(a).to_string()))
    }

    #[test]
    fn bodies_read_as_go_xml() {
        let cases = [
            ("get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris & <b>Rome</b></arg_value>\n",
                Some(("get_weather", r#"{"city":"Paris & <b>Rome</b>"}"#))),
            // Text between arguments joins the name; \r\n reads as \n; keys are trimmed.
            ("f<arg_key> a </arg_key>x<arg_value>\r\n1\r\n</arg_value>",
                Some(("fx", r#"{"a":"1"}"#))),
            // A nested argument's text is skipped.
            ("f<arg_key>a<arg_key>b</arg_key>c</arg_key><arg_value>v</arg_value>",
                Some(("f", r#"{"ac":"v"}"#))),
            ("<arg_key>a</arg_key><arg_value>v</arg_value>", None),
            ("f<arg_key>a</arg_key>", None),
            ("f<arg_key>a</arg_key><arg_value>\u{1}</arg_value>", None),
            // Repaired: missing opening and closing tags.
            ("get_weather city</arg_key><arg_value>Oslo</arg_value>",
                Some(("get_weather", r#"{"city":"Oslo"}"#))),
            ("f<arg_key>a</arg_key>1</arg_value>", Some(("f", r#"{"a":"1"}"#))),
            ("f<arg_key>a<arg_value>1</arg_value>", Some(("f", r#"{"a":"1"}"#))),
            ("f<arg_key>a</arg_key><arg_value>1", Some(("f", r#"{"a":"1"}"#))),
            ("f<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b", Some(("f", r#"{"a":"1","b":""}"#))),
            // Well-formed, so not repaired: a value without a key fails.
            ("f<arg_value>1</arg_value>", None),
        ];
        for (body, want) in cases {
            let want = want.map(|(n, a)| (n.to_string(), a.to_string()));
            assert_eq!(args(body), want, "{body:?}");
        }
    }

    #[test]
    fn repair_follows_the_tag_cycle() {
        for (s, want) in [
            ("plain", "plain"),
            ("f<arg_key>k</arg_key>v</arg_value>", "f<arg_key>k</arg_key><arg_value>v</arg_value>"),
            ("f k</arg_key><arg_value>v", "f<arg_key>k</arg_key><arg_value>v</arg_value>"),
            // The text before an unexpected opening tag becomes the value.
            ("f<arg_key>k<arg_key>j", "f<arg_key></arg_key><arg_value>k</arg_value><arg_key>j</arg_key><arg_value></arg_value>"),
            ("f<arg_key>k</arg_key><arg_value>v</arg_value> tail", "f<arg_key>k</arg_key><arg_value>v</arg_value>"),
            ("f</arg_value>x", "f<arg_key></arg_key><arg_value></arg_value>"),
        ] {
            assert_eq!(repair(s), want, "{s:?}");
        }
    }

    #[test]
    fn values_are_typed_by_the_schema() {
        let body = "get_weather<arg_key>days</arg_key><arg_value>\n3\n</arg_value>\
            <arg_key>temp</arg_key><arg_value>21.5</arg_value>\
            <arg_key>metric</arg_key><arg_value>yes</arg_value>\
            <arg_key>tags</arg_key><arg_value>[\"a\", 1.0]</arg_value>\
            <arg_key>opts</arg_key><arg_value>{\"z\": 1, \"a\": null}</arg_value>\
            <arg_key>either</arg_key><arg_value>x1</arg_value>\
            <arg_key>maybe</arg_key><arg_value>TRUE</arg_value>\
            <arg_key>city</arg_key><arg_value>NULL</arg_value>\
            <arg_key>unknown</arg_key><arg_value>\n\n5\n\n</arg_value>";
        assert_eq!(
            args(body).unwrap().1,
            r#"{"days":3,"temp":21.5,"metric":false,"tags":["a",1],"opts":{"a":null,"z":1},"either":"x1","maybe":true,"city":null,"unknown":"\n5\n"}"#
        );
        let t = |raw: &str, ty: &[&str]| {
            typed_value(raw, &ty.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(t("1e3", &["number"]), json!(1000));
        assert_eq!(t("1e400", &["number"]), json!("1e400"));
        assert_eq!(t("-inf", &["number"]), json!(i64::MIN));
        assert_eq!(t("1e19", &["number"]), json!(i64::MIN));
        assert_eq!(t("nan", &["number"]), json!("nan"));
        assert_eq!(t("+nan", &["number", "integer"]), json!("+nan"));
        assert_eq!(t("0x10", &["integer", "number"]), json!("0x10"));
        assert_eq!(t("12", &["integer", "number"]), json!(12));
        assert_eq!(t("1.5", &["integer"]), json!("1.5"));
        assert_eq!(t("[1]", &["object"]), json!("[1]"));
        assert_eq!(t(" null", &["array"]), J::Null);
        assert_eq!(t("{}", &["array", "object"]), json!({}));
        assert_eq!(t("maybe", &["boolean", "integer"]), json!("maybe"));
        assert_eq!(t("7", &[]), json!("7"));
    }

    #[test]
    fn unclosed_calls_must_be_complete_and_declared() {
        let s = schemas();
        let ok = parse_unclosed(
            "get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>",
            &s,
        );
        assert_eq!(
            ok.map(|(n, a)| (n, J::Object(a).to_string())),
            Some(("get_weather".into(), r#"{"city":"Rome"}"#.into()))
        );
        for body in [
            "get_weather<arg_key>city</arg_key><arg_value>Rome",             // no repair at the end
            "other<arg_key>city</arg_key><arg_value>Rome</arg_value>",       // undeclared
            "get_weather<arg_key>days</arg_key><arg_value>1</arg_value>",    // required missing
            "get_weather<arg_key>city</arg_key><arg_value>R</arg_value><arg_key> </arg_key><arg_value>1</arg_value>",
            "",
        ] {
            assert!(parse_unclosed(body, &s).is_none(), "{body:?}");
        }
    }
}
