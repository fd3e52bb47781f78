//! The Qwen3-Coder tool-call format, owned here for every parser that reads it: the text between
//! `<tool_call>` and `</tool_call>` (`<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>…
//! </function>`), read the way Ollama's `parseToolCall` reads it ([`decode`], [`call`]), and
//! argument values typed from the tool's schema (`parseValue`: [`typed_value`], [`param_types`]).
//! Ollama's `qwen3-coder` parser ([`super::qwen3coder`]) and the Nemotron 3 and Qwen 3.5 parsers
//! built on it ([`super::nemotron`], [`super::qwen35`]) read calls with it; the GLM parser
//! ([`super::glm`]) types its values with [`typed_value`], as Ollama's does with `parseValue`.
//! [`CallFormat`] names this format and the JSON ones of the other `<tool_call>` families (Qwen 3,
//! Qwen3-VL), and turns a call's text into a tool call or, failing that, content.
//!
//! Ollama rewrites `<name=value>` tags into XML (`<name name="value">`, the value XML-escaped),
//! escapes the text between `<function…>`/`<parameter…>` tags, and decodes the result with Go's
//! strict `encoding/xml` into `<function name>` with its direct `<parameter name>` children. herd
//! does the same rewrite and then reads the tag/text pieces with the same rules instead of
//! printing and re-parsing XML: text before the first element is skipped, the root must be a
//! `function` element, elements nested in a parameter (or a function nested in the function) are
//! skipped with their text, anything after the root's end is ignored, `\r\n` and `\r` in text
//! read as `\n`, and what Go's decoder rejects (mismatched or unclosed tags, an end tag with an
//! attribute, characters XML forbids, a bad entity in a literal `name="…"`) is an error.

use regex::Regex;
use serde_json::{Map, Value as J};
use std::sync::OnceLock;

use super::{govalue, Parsed};
use crate::prompt::renderers::qwen3coder::type_names;

/// The tags around a call in every format below.
pub(crate) const CALL_OPEN: &str = "<tool_call>";
pub(crate) const CALL_CLOSE: &str = "</tool_call>";

/// How the text between `<tool_call>` and `</tool_call>` is read, per family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CallFormat {
    /// The XML format above, values typed by the tools' schemas (qwen3-coder, Qwen 3.5,
    /// Nemotron 3).
    Xml,
    /// JSON `{"name": …, "arguments": {…}}`, a name required (Ollama's `parseQwen3ToolCall`:
    /// Qwen 3).
    Json,
    /// JSON decoded into `api.ToolCallFunction` (Ollama's `parseJSONToolCall`: Qwen3-VL).
    Function,
}

impl CallFormat {
    /// The call in `raw`; `None` where Ollama's decoding fails.
    pub(crate) fn read(self, raw: &str, schemas: &[J]) -> Option<(String, Map<String, J>)> {
        match self {
            CallFormat::Xml => call(raw, schemas),
            CallFormat::Json => govalue::function(raw, false).filter(|(name, _)| !name.is_empty()),
            CallFormat::Function => govalue::function(raw, true),
        }
    }

    /// Appends the call in `raw` to `out`, with a fresh id and the response's next `index`; one
    /// that does not decode, which fails Ollama's whole request, is kept as content with its
    /// tags instead, as herd's other tool parsers keep unparseable calls.
    pub(crate) fn emit(self, raw: &str, schemas: &[J], index: &mut i64, out: &mut Parsed) {
        match self.read(raw, schemas) {
            Some((name, arguments)) => {
                out.push_call(index, name, arguments);
            }
            None => {
                out.content.push_str(CALL_OPEN);
                out.content.push_str(raw);
                out.content.push_str(CALL_CLOSE);
            }
        }
    }
}

/// A decoded `<function>`: its name and its parameters' names and raw text, in order.
#[derive(Debug, PartialEq)]
pub(super) struct RawCall {
    pub name: String,
    pub params: Vec<(String, String)>,
}

/// One call's name and arguments, typed by `schemas` (the request's tools as sent); `None` where
/// Ollama's decoding fails (Ollama then fails the request; herd's parsers keep the text as
/// content). The function name is not checked against the tools.
pub(super) fn call(raw: &str, schemas: &[J]) -> Option<(String, Map<String, J>)> {
    let c = decode(raw).ok()?;
    let mut arguments = Map::new();
    for (key, value) in c.params {
        let types = param_types(schemas, &c.name, &key);
        arguments.insert(key, typed_value(&value, &types));
    }
    Some((c.name, arguments))
}

/// Reads one call; `Err` carries the reason Go's XML decoder would give.
pub(super) fn decode(raw: &str) -> Result<RawCall, String> {
    let xml = rewrite_tags(raw);
    let mut toks = tokens(&xml).into_iter();
    // Go's Unmarshal skips everything up to the first start element.
    let (root, name) = loop {
        match toks.next() {
            None => return Err("EOF".into()),
            Some(Tok::Text(t)) => check_chars(&t)?,
            Some(Tok::End(n)) => return Err(format!("unexpected end element </{n}>")),
            Some(Tok::Start(n, attr)) => break (n, attr),
        }
    };
    if root != "function" {
        return Err(format!(
            "expected element type <function> but have <{root}>"
        ));
    }
    let mut call = RawCall {
        name: name.unwrap_or_default(),
        params: Vec::new(),
    };
    loop {
        match toks.next() {
            None => return Err("unexpected EOF".into()),
            Some(Tok::Text(t)) => check_chars(&t)?,
            Some(Tok::Start("parameter", attr)) => {
                let mut value = String::new();
                loop {
                    match toks.next() {
                        None => return Err("unexpected EOF".into()),
                        Some(Tok::Text(t)) => {
                            check_chars(&t)?;
                            value.push_str(&t);
                        }
                        Some(Tok::Start(n, _)) => skip(&mut toks, n)?,
                        Some(Tok::End("parameter")) => break,
                        Some(Tok::End(n)) => return Err(mismatch("parameter", n)),
                    }
                }
                call.params.push((attr.unwrap_or_default(), value));
            }
            Some(Tok::Start(n, _)) => skip(&mut toks, n)?,
            Some(Tok::End("function")) => return Ok(call),
            Some(Tok::End(n)) => return Err(mismatch("function", n)),
        }
    }
}

#[derive(Debug)]
enum Tok {
    /// An element start with its decoded `name` attribute, if it has one.
    Start(&'static str, Option<String>),
    End(&'static str),
    /// Character data (already in its decoded form: Ollama's escaping round-trips).
    Text(String),
}

fn mismatch(open: &str, close: &str) -> String {
    format!("element <{open}> closed by </{close}>")
}

/// Skips an element whose start was just read, with everything inside it.
fn skip(toks: &mut impl Iterator<Item = Tok>, open: &'static str) -> Result<(), String> {
    let mut stack = vec![open];
    while let Some(top) = stack.last().copied() {
        match toks.next() {
            None => return Err("unexpected EOF".into()),
            Some(Tok::Text(t)) => check_chars(&t)?,
            Some(Tok::Start(n, _)) => stack.push(n),
            Some(Tok::End(n)) if n == top => {
                stack.pop();
            }
            Some(Tok::End(n)) => return Err(mismatch(top, n)),
        }
    }
    Ok(())
}

/// Ollama's first pass: every `<word=value>` becomes `<word name="escaped value">`.
fn rewrite_tags(raw: &str) -> String {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"<([0-9A-Za-z_]+)=([^>]+)>").expect("valid regex"));
    re.replace_all(raw, |c: &regex::Captures| {
        format!("<{} name=\"{}\">", &c[1], escape_attr(&c[2]))
    })
    .into_owned()
}

/// Go's `xml.EscapeText`: markup characters and `\t\n\r` as references, characters XML forbids
/// as U+FFFD.
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

/// The XML `Char` production (Go's `isInCharacterRange`).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

fn check_chars(s: &str) -> Result<(), String> {
    match s.chars().find(|&c| !xml_char(c)) {
        Some(c) => Err(format!("illegal character code U+{:04X}", c as u32)),
        None => Ok(()),
    }
}

/// Ollama's second pass: the `<function…>`/`<parameter…>` tags in the rewritten text, and the
/// text between them (which Ollama escapes, so Go's decoder hands it back unchanged apart from
/// line-end normalization).
fn tokens(xml: &str) -> Vec<Tok> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r#"</?(?:function|parameter)(?:[\t\n\x0C\r ]+name="[^"]*")?>"#)
            .expect("valid regex")
    });
    let mut out = Vec::new();
    let mut last = 0;
    for m in re.find_iter(xml) {
        if m.start() > last {
            out.push(Tok::Text(newlines(&xml[last..m.start()])));
        }
        out.push(tag(m.as_str()));
        last = m.end();
    }
    if last < xml.len() {
        out.push(Tok::Text(newlines(&xml[last..])));
    }
    out
}

/// One matched tag as Go's decoder reads it; malformed ones become a text token holding a
/// forbidden character so that the decode fails where Go's would.
fn tag(t: &str) -> Tok {
    let end = t.starts_with("</");
    let body = &t[if end { 2 } else { 1 }..t.len() - 1];
    let name: &'static str = if body.starts_with("function") {
        "function"
    } else {
        "parameter"
    };
    let rest = &body[name.len()..];
    if rest.is_empty() {
        return if end {
            Tok::End(name)
        } else {
            Tok::Start(name, None)
        };
    }
    // ` name="…"`: an end tag may not carry it, form feed is no XML space, and the value must
    // be valid attribute text.
    let spaces = rest.len()
        - rest
            .trim_start_matches([' ', '\t', '\n', '\r', '\x0C'])
            .len();
    if end || rest[..spaces].contains('\x0C') {
        return Tok::Text(INVALID.into());
    }
    let value = &rest[spaces + "name=\"".len()..rest.len() - 1];
    match attr_value(value) {
        Some(v) => Tok::Start(name, Some(v)),
        None => Tok::Text(INVALID.into()),
    }
}

/// Text that fails [`check_chars`]: stands in for a syntax error at that point of the stream.
const INVALID: &str = "\u{0}";

/// `\r\n` and a lone `\r` read as `\n` (Go's decoder does this to unescaped text).
fn newlines(s: &str) -> String {
    if s.contains('\r') {
        s.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        s.to_string()
    }
}

/// A quoted attribute value as Go's strict decoder reads it: the five named entities and
/// numeric references, no raw `<`, line ends normalized, only XML characters. `None` = error.
fn attr_value(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = newlines(raw);
    while let Some(i) = rest.find(['&', '<']) {
        out.push_str(&rest[..i]);
        if rest[i..].starts_with('<') {
            return None;
        }
        let after = &rest[i + 1..];
        let semi = after.find(';')?;
        let ent = &after[..semi];
        let c = if let Some(num) = ent.strip_prefix('#') {
            let (digits, radix) = match num.strip_prefix('x') {
                Some(h) => (h, 16),
                None => (num, 10),
            };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            let n = u64::from_str_radix(digits, radix).ok()?;
            if n > 0x10FFFF {
                return None;
            }
            // Go's `string(rune(n))` turns a surrogate into U+FFFD.
            char::from_u32(n as u32).unwrap_or('\u{FFFD}')
        } else {
            match ent {
                "lt" => '<',
                "gt" => '>',
                "amp" => '&',
                "apos" => '\'',
                "quot" => '"',
                _ => return None,
            }
        };
        out.push(c);
        rest = after[semi + 1..].to_string();
    }
    out.push_str(&rest);
    out.chars().all(xml_char).then_some(out)
}

/// The schema types of a call's parameter, from the request's tools as sent: the first tool of
/// that name, its property of that name ([`property_types`]).
pub(super) fn param_types(schemas: &[J], tool: &str, param: &str) -> Vec<String> {
    schemas
        .iter()
        .find(|t| t.pointer("/function/name").and_then(J::as_str) == Some(tool))
        .and_then(|t| t.pointer("/function/parameters/properties"))
        .and_then(|p| p.get(param))
        .map(property_types)
        .unwrap_or_default()
}

/// A property's types as Ollama collects them: its `anyOf` members' types, else its own `type`
/// (Go's `PropertyType`: a string or a list; `null` reads as one empty name).
pub(super) fn property_types(prop: &J) -> Vec<String> {
    match prop.get("anyOf").and_then(J::as_array) {
        Some(any) if !any.is_empty() => any.iter().flat_map(type_names).collect(),
        _ => type_names(prop),
    }
}

/// Ollama's `parseValue`: one leading and one trailing `\n` dropped, `null` (any case) is null,
/// then the declared types tried as boolean, integer, number, array, object, string; a lone
/// declared type that does not parse gives the text (a lone `boolean` gives false).
pub(super) fn typed_value(raw: &str, types: &[String]) -> J {
    let raw = raw.strip_prefix('\n').unwrap_or(raw);
    let raw = raw.strip_suffix('\n').unwrap_or(raw);
    let text = || J::String(raw.to_string());
    if raw.to_lowercase() == "null" {
        return J::Null;
    }
    if types.is_empty() {
        return text();
    }
    let has = |t: &str| types.iter().any(|x| x == t);
    let only = types.len() == 1;
    if has("boolean") {
        match raw.to_lowercase().as_str() {
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
        match govalue::parse_float(raw) {
            // Go's `int64(f)` of a whole value (±Inf included): beyond int64 it is the minimum
            // (amd64).
            Some(f) if f.trunc() == f => return J::from(govalue::int64(f)),
            // NaN has no JSON form (Go fails the response); herd keeps the text.
            Some(f) if !f.is_nan() => return govalue::float(f),
            _ if only => return text(),
            _ => {}
        }
    }
    for (kind, want_array) in [("array", true), ("object", false)] {
        if has(kind) {
            match govalue::decode(raw) {
                // Go decodes `null` into a nil slice or map without error.
                Some(J::Null) => return J::Null,
                Some(v @ J::Array(_)) if want_array => return govalue::any(v),
                Some(v @ J::Object(_)) if !want_array => return govalue::any(v),
                _ if only => return text(),
                _ => {}
            }
        }
    }
    text()
}

#[cfg(test)]
#[path = "qwen3coder_call_tests.rs"]
mod tests;
