//! Gemma 4 tool-call bodies (`call:NAME{key:value,…}`) to a name and JSON arguments, for the
//! `gemma4` / `gemma4-no-thinking` parsers ([`super::gemma4`]), as Ollama's
//! `parseGemma4ToolCall` does it: strings between `<|"|>` delimiters become JSON strings taken
//! literally (no escapes), bare keys are quoted, and the result must be a JSON object. When it
//! is not, a few repairs are tried (Ollama's `gemma4RepairCandidates`): single-quoted values,
//! an unclosed final `<|"|>` string, and — only for a tool whose schema types that argument as a
//! string — a raw unquoted final value; each candidate must then parse.
//!
//! The conversion is Ollama's byte for byte, including its placeholder scheme (each delimited
//! string is swapped out as `\0` + the rune of its index + `\0` while keys are quoted).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value as J};

use super::govalue;
use crate::prompt::gotmpl::json_string;

const Q: &str = "<|\"|>";

/// The function name and arguments of a call body; `None` when it does not parse even after
/// the repairs (Ollama logs and drops such a call).
pub fn parse_call(body: &str, tools: &[J]) -> Option<(String, Map<String, J>)> {
    let rest = body.strip_prefix("call:")?;
    let brace = rest.find('{')?;
    let name = rest[..brace].trim().to_string();
    let args = &rest[brace..];
    let parsed = govalue::arguments(&to_json(args))
        .or_else(|| repairs(args, &name, tools).find_map(|c| govalue::arguments(&to_json(&c))))?;
    Some((name, parsed))
}

/// `gemma4ArgsToJSON`.
pub fn to_json(s: &str) -> String {
    let mut strings = Vec::new();
    let mut text = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find(Q) {
        let body = &rest[open + Q.len()..];
        let Some(close) = body.find(Q) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&placeholder(strings.len()));
        strings.push(&body[..close]);
        rest = &body[close + Q.len()..];
    }
    text.push_str(rest);
    let mut text = quote_bare_keys(&text);
    for (i, v) in strings.iter().enumerate() {
        text = text.replace(&placeholder(i), &json_string(&J::String(v.to_string())));
    }
    text
}

/// Go's `"\x00" + string(rune(i)) + "\x00"` (an invalid rune prints as U+FFFD).
fn placeholder(i: usize) -> String {
    let c = u32::try_from(i)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{FFFD}');
    format!("\0{c}\0")
}

/// `quoteGemma4BareKeys`: after `{` or `,` (and any whitespace), a run of letters, digits and
/// `_` followed directly by `:` is quoted; JSON strings are copied untouched.
fn quote_bare_keys(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len() + 16);
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] == b'"' {
            if let Some(end) = json_string_end(s, i) {
                i = end;
                continue;
            }
        }
        if b[i] != b'{' && b[i] != b',' {
            i += 1;
            continue;
        }
        i = skip_space(s, i + 1);
        let key_end = key_end(s, i);
        if key_end > i && b.get(key_end) == Some(&b':') {
            out.push_str(&s[copied..i]);
            out.push('"');
            out.push_str(&s[i..key_end]);
            out.push_str("\":");
            i = key_end + 1;
            copied = i;
        }
    }
    out.push_str(&s[copied..]);
    out
}

/// End of a run of Go `unicode.IsLetter`/`IsDigit` runes and `_` starting at `i`.
fn key_end(s: &str, i: usize) -> usize {
    static KEY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[_\p{L}\p{Nd}]*").expect("static pattern"));
    i + KEY.find(&s[i..]).map_or(0, |m| m.end())
}

/// `gemma4JSONQuotedStringEnd`: the index after the closing quote of the JSON string opening
/// at `start`.
fn json_string_end(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut escaped = false;
    for (i, &c) in b.iter().enumerate().skip(start + 1) {
        if c == b'"' && !escaped {
            return Some(i + 1);
        }
        escaped = c == b'\\' && !escaped;
    }
    None
}

fn skip_space(s: &str, i: usize) -> usize {
    s.len() - s[i..].trim_start().len()
}

/// `gemma4TrimRightSpaceIndex`.
fn trimmed_end(s: &str) -> usize {
    s.trim_end().len()
}

/// `gemma4RepairCandidates`: the argument text with the generic repairs, then (for a string
/// argument of the named tool's schema) with a raw final value delimited; de-duplicated.
fn repairs<'a>(args: &'a str, name: &'a str, tools: &'a [J]) -> impl Iterator<Item = String> + 'a {
    let generic = repaired(args, false);
    let raw = raw_terminal_string(args, name, tools).map(|r| repaired(&r, true));
    let raw = raw.filter(|r| *r != generic);
    std::iter::once(generic).chain(raw)
}

fn repaired(candidate: &str, close_object: bool) -> String {
    let s = missing_delimiter(&single_quoted(candidate));
    if close_object || s != candidate {
        missing_object_close(&s)
    } else {
        s
    }
}

/// `repairGemma4MissingStringDelimiter`: an odd count of delimiters gets one more at the end
/// (before a final `}` or `]`).
fn missing_delimiter(s: &str) -> String {
    if s.matches(Q).count().is_multiple_of(2) {
        return s.to_string();
    }
    let mut at = trimmed_end(s);
    if at > 0 && matches!(s.as_bytes()[at - 1], b'}' | b']') {
        at -= 1;
    }
    format!("{}{Q}{}", &s[..at], &s[at..])
}

/// `repairGemma4MissingObjectClose`: an object missing its final `}` gets one.
fn missing_object_close(s: &str) -> String {
    let end = trimmed_end(s);
    if !s.trim_start().starts_with('{') || s[..end].ends_with('}') {
        return s.to_string();
    }
    format!("{}}}{}", &s[..end], &s[end..])
}

/// `repairGemma4SingleQuotedValues`: a value in single quotes becomes a delimited string (a
/// stray delimiter right after it is dropped); delimited and JSON strings are left alone.
fn single_quoted(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i..].starts_with(Q.as_bytes()) {
            match s[i + Q.len()..].find(Q) {
                Some(end) => i += 2 * Q.len() + end,
                None => break,
            }
            continue;
        }
        if b[i] == b'"' {
            if let Some(end) = json_string_end(s, i) {
                i = end;
                continue;
            }
        }
        i += 1;
        if b[i - 1] != b':' {
            continue;
        }
        i = skip_space(s, i);
        if b.get(i) != Some(&b'\'') {
            continue;
        }
        let Some((value, end)) = single_quoted_value(s, i) else {
            continue;
        };
        out.push_str(&s[copied..i]);
        out.push_str(Q);
        out.push_str(value);
        out.push_str(Q);
        i = end;
        if b[i..].starts_with(Q.as_bytes()) {
            i += Q.len();
        }
        copied = i;
    }
    out.push_str(&s[copied..]);
    out
}

/// `gemma4SingleQuotedValue`: the text up to the next unescaped `'`, and the index after it.
fn single_quoted_value(s: &str, start: usize) -> Option<(&str, usize)> {
    let b = s.as_bytes();
    let mut escaped = false;
    for (i, &c) in b.iter().enumerate().skip(start + 1) {
        if c == b'\'' && !escaped {
            return Some((&s[start + 1..i], i + 1));
        }
        escaped = c == b'\\' && !escaped;
    }
    None
}

/// The properties of the named tool's schema (first tool of that name).
fn properties<'a>(name: &str, tools: &'a [J]) -> Option<&'a Map<String, J>> {
    tools
        .iter()
        .find(|t| t.pointer("/function/name").and_then(J::as_str) == Some(name))?
        .pointer("/function/parameters/properties")?
        .as_object()
}

/// `gemma4PropertyAcceptsString`: its type (or an `anyOf` branch's) includes "string".
fn accepts_string(prop: &J) -> bool {
    let types = match prop.get("type") {
        Some(J::String(s)) => vec![s.as_str()],
        Some(J::Array(a)) => a.iter().filter_map(J::as_str).collect(),
        _ => Vec::new(),
    };
    types.iter().any(|t| t.eq_ignore_ascii_case("string"))
        || prop
            .get("anyOf")
            .and_then(J::as_array)
            .is_some_and(|a| a.iter().any(accepts_string))
}

/// `repairGemma4RawTerminalStringValue`: for the first string property (in schema order) whose
/// key appears with a raw (not quoted, not structured, not a JSON literal) value, that value —
/// up to the next `,known_key:` or the final `}` — wrapped in delimiters.
fn raw_terminal_string(s: &str, name: &str, tools: &[J]) -> Option<String> {
    let props = properties(name, tools)?;
    props
        .iter()
        .filter(|(_, p)| accepts_string(p))
        .find_map(|(key, _)| raw_string_for_key(s, key, props))
}

fn raw_string_for_key(s: &str, key: &str, props: &Map<String, J>) -> Option<String> {
    let mut from = 0;
    while from < s.len() {
        let start = value_start(s, key, from)?;
        let check = skip_space(s, start);
        if check < s.len() && starts_structured(&s[check..]) {
            from = start;
            continue;
        }
        let end = raw_value_end(s, start, props);
        return Some(format!(
            "{}{Q}{}{Q}{}",
            &s[..start],
            &s[start..end],
            &s[end..]
        ));
    }
    None
}

/// `gemma4FindValueStartForKey`: the index after `KEY:` following a `{` or `,` at or after
/// `from`, skipping delimited and JSON strings; `None` at an unclosed delimited string.
fn value_start(s: &str, key: &str, from: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = from;
    while i < b.len() {
        if b[i..].starts_with(Q.as_bytes()) {
            let end = s[i + Q.len()..].find(Q)?;
            i += 2 * Q.len() + end;
            continue;
        }
        if b[i] == b'"' {
            if let Some(end) = json_string_end(s, i) {
                i = end;
                continue;
            }
        }
        if b[i] == b'{' || b[i] == b',' {
            let k = skip_space(s, i + 1);
            if s[k..].starts_with(key) {
                let colon = skip_space(s, k + key.len());
                if b.get(colon) == Some(&b':') {
                    return Some(colon + 1);
                }
            }
        }
        i += 1;
    }
    None
}

/// `gemma4RawStringValueEnd`: the first `,` followed by a key of the schema and `:`, else the
/// final `}`, else the end.
fn raw_value_end(s: &str, start: usize, props: &Map<String, J>) -> usize {
    let b = s.as_bytes();
    for i in start..b.len() {
        if b[i] != b',' {
            continue;
        }
        let k = skip_space(s, i + 1);
        let e = key_end(s, k);
        if e == k {
            continue;
        }
        let colon = skip_space(s, e);
        if b.get(colon) == Some(&b':') && props.contains_key(&s[k..e]) {
            return i;
        }
    }
    let end = trimmed_end(s);
    if end > start && b[end - 1] == b'}' {
        end - 1
    } else {
        s.len()
    }
}

/// `gemma4ValueStartsStructured`: a delimited, quoted, object or array value, or a JSON literal
/// (`-`, digit, `t`, `f`, `n`).
fn starts_structured(v: &str) -> bool {
    v.starts_with(Q)
        || v.bytes().next().is_some_and(|c| {
            matches!(
                c,
                b'\'' | b'"' | b'{' | b'[' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> String {
        s.replace('`', Q)
    }

    #[test]
    fn arguments_to_json() {
        let cases = [
            ("{location:`Paris`}", r#"{"location":"Paris"}"#),
            (
                "{ a :1, b_2:true,c:null}",
                r#"{ a :1, "b_2":true,"c":null}"#,
            ),
            (
                "{\n  cfg:{on:true,name:`t`}}",
                "{\n  \"cfg\":{\"on\":true,\"name\":\"t\"}}",
            ),
            (
                "{tags:[`a`,`b, c:`],n:[1,2]}",
                r#"{"tags":["a","b, c:"],"n":[1,2]}"#,
            ),
            (
                "{s:`say \"hi\" \\n C:\\x <b>`}",
                r#"{"s":"say \"hi\" \\n C:\\x \u003cb\u003e"}"#,
            ),
            (
                "{q:\"keep , old: \\\"x\\\"\",n:`ok`}",
                r#"{"q":"keep , old: \"x\"","n":"ok"}"#,
            ),
            ("{ключ:1,ä_1:2}", r#"{"ключ":1,"ä_1":2}"#),
            ("{cmd:`date\n`}", r#"{"cmd":"date\n"}"#),
            ("{open:`never closed}", "{\"open\":<|\"|>never closed}"),
            ("{}", "{}"),
        ];
        for (input, want) in cases {
            assert_eq!(to_json(&q(input)), want, "{input}");
        }
    }

    fn string_tool(name: &str, keys: &[&str]) -> J {
        let props: Map<String, J> = keys
            .iter()
            .map(|k| (k.to_string(), json!({"type": "string"})))
            .collect();
        json!({"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}})
    }

    #[test]
    fn calls_parse_with_ollamas_repairs() {
        let write = string_tool("write", &["content", "mode"]);
        let grep = string_tool("grep", &["include", "pattern", "path"]);
        let union = json!({"type": "function", "function": {"name": "u", "parameters": {"properties": {
            "n": {"type": "number"}, "v": {"anyOf": [{"type": "number"}, {"type": ["null", "STRING"]}]}}}}});
        let tools = [write, grep, union];
        let cases: Vec<(&str, Option<(&str, J)>)> = vec![
            (
                "call:get_weather{location:`Paris`}",
                Some(("get_weather", json!({"location": "Paris"}))),
            ),
            (
                "call: spaced {n:1,b:`true`,z:null}",
                Some(("spaced", json!({"n": 1, "b": "true", "z": null}))),
            ),
            (
                "call:dup{a:1,b:2,a:3}",
                Some(("dup", json!({"a": 3, "b": 2}))),
            ),
            ("call:f{q:\"a,b:c\"}", Some(("f", json!({"q": "a,b:c"})))),
            // Not a call, no brace, JSON escapes that are invalid, trailing text.
            ("calls:f{}", None),
            ("call:f", None),
            ("call:f{path:\"C:\\users\"}", None),
            ("call:f{a:1}}", None),
            // An unclosed final string, closed before the object's brace.
            (
                "call:bash{path:`/tmp`,command:`ls}",
                Some(("bash", json!({"path": "/tmp", "command": "ls"}))),
            ),
            // Single-quoted values, with a stray delimiter after one.
            (
                "call:grep{include:`*.py`,pattern:':\\s*\\w+'`,path:'/d'}",
                Some((
                    "grep",
                    json!({"include": "*.py", "pattern": ":\\s*\\w+", "path": "/d"}),
                )),
            ),
            // A raw string value: only for a string property of the named tool.
            (
                "call:write{content:\n\n# Title, it's \"x\"",
                Some(("write", json!({"content": "\n\n# Title, it's \"x\""}))),
            ),
            (
                "call:write{content:hello, world,mode:`fast`}",
                Some(("write", json!({"content": "hello, world", "mode": "fast"}))),
            ),
            ("call:other{content:hello", None),
            ("call:write{content:123x}", None),
            ("call:u{n:abc}", None),
            ("call:u{v:abc}", Some(("u", json!({"v": "abc"})))),
            // A non-final unclosed string is not repaired.
            ("call:write{content:`one,mode:`two`}", None),
        ];
        for (body, want) in cases {
            let got = parse_call(&q(body), &tools);
            let want = want.map(|(n, a)| (n.to_string(), a.as_object().cloned().unwrap()));
            assert_eq!(got, want, "{body}");
        }
        // Keys keep the model's order.
        let (_, args) = parse_call("call:f{z:1,a:2}", &[]).unwrap();
        assert_eq!(args.keys().collect::<Vec<_>>(), ["z", "a"]);
    }

    #[test]
    fn repair_steps() {
        assert_eq!(missing_delimiter(&q("{c:`ls}")), q("{c:`ls`}"));
        assert_eq!(missing_delimiter(&q("{c:[`ls]  ")), q("{c:[`ls`]  "));
        assert_eq!(missing_delimiter(&q("{c:`ls")), q("{c:`ls`"));
        assert_eq!(missing_delimiter(&q("{c:`ls`}")), q("{c:`ls`}"));
        assert_eq!(missing_object_close("{n:1 \n"), "{n:1} \n");
        assert_eq!(missing_object_close("{n:1}"), "{n:1}");
        assert_eq!(missing_object_close("[1"), "[1");
        assert_eq!(
            single_quoted(&q("{a:'x',b: 'y\\'z'`}")),
            q("{a:`x`,b: `y\\'z`}")
        );
        assert_eq!(
            single_quoted(&q("{a:`'no'`,b:\"':'\",c:'open}")),
            q("{a:`'no'`,b:\"':'\",c:'open}")
        );
        // Candidates: generic repairs only close the object when they changed something.
        let tools = [string_tool("write", &["content"])];
        assert_eq!(
            repairs("{n:1", "count", &tools).collect::<Vec<_>>(),
            ["{n:1"]
        );
        assert_eq!(
            repairs("{content:hello", "write", &tools).collect::<Vec<_>>(),
            ["{content:hello".to_string(), q("{content:`hello`}")]
        );
    }
}
