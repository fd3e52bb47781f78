//! The content side of Ollama's Nemotron 3 parser, which is Ollama's `Qwen3CoderParser`: tool
//! calls as
//! `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`.
//!
//! Streaming, as Ollama does it: content before `<tool_call>` loses its trailing whitespace,
//! whitespace after `</tool_call>` is dropped, and content's trailing whitespace (or a partial
//! `<tool_call>`) is held until more text shows what it is — so a response's final trailing
//! whitespace, a partial tag at its very end, and a call it never closes are not delivered.
//!
//! A call is read as Ollama reads it: `<word=value>` tags become XML elements with a `name`
//! attribute, the text between the `function`/`parameter` elements is character data, and the
//! first `<function>` element is decoded (Go's `encoding/xml` rules: leading text skipped,
//! other children ignored, control characters, `]]>` and mismatched tags are errors, `\r\n`
//! becomes `\n`). Each value loses one leading and one trailing newline and is typed by the
//! tool's schema (`null`, then boolean, integer, number, array, object, string). The function
//! name is not checked against the request's tools. Where Ollama fails the whole request on a
//! call it cannot decode, herd keeps the text as content (as herd's other tool parsers do).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value as J};

use super::olmo3::go_float;
use super::{call_id, partial_tag_len, Parsed};
use crate::prompt::ToolCall;

pub const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Tool-call extraction from content.
pub struct XmlCalls {
    schemas: Vec<J>,
    in_call: bool,
    /// After a call: leading whitespace is dropped.
    trim_lead: bool,
    buf: String,
    index: i64,
}

impl XmlCalls {
    pub fn new(schemas: &[J]) -> XmlCalls {
        XmlCalls {
            schemas: schemas.to_vec(),
            in_call: false,
            trim_lead: false,
            buf: String::new(),
            index: 0,
        }
    }

    /// Feed content; `done` drops what is still held (Ollama never delivers it).
    pub fn add(&mut self, chunk: &str, done: bool, out: &mut Parsed) {
        self.buf.push_str(chunk);
        loop {
            if self.in_call {
                let Some(i) = self.buf.find(CLOSE) else {
                    break;
                };
                let raw: String = self.buf.drain(..i + CLOSE.len()).collect();
                let raw = &raw[..i];
                match parse_call(raw, &self.schemas) {
                    Some((name, arguments)) => {
                        out.tool_calls.push(ToolCall {
                            id: call_id(),
                            index: self.index,
                            name,
                            arguments,
                        });
                        self.index += 1;
                    }
                    None => out.content.push_str(&format!("{OPEN}{raw}{CLOSE}")),
                }
                self.in_call = false;
                self.trim_lead = true;
                continue;
            }
            if self.trim_lead {
                let lead = self.buf.len() - self.buf.trim_start().len();
                self.buf.drain(..lead);
                if self.buf.is_empty() {
                    break;
                }
                self.trim_lead = false;
            }
            if let Some(i) = self.buf.find(OPEN) {
                out.content.push_str(self.buf[..i].trim_end());
                self.buf.drain(..i + OPEN.len());
                self.in_call = true;
                continue;
            }
            let keep = partial_tag_len(&self.buf, &[OPEN]);
            let emit = self.buf[..self.buf.len() - keep].trim_end().len();
            out.content.push_str(&self.buf[..emit]);
            self.buf.drain(..emit);
            break;
        }
        if done {
            self.buf.clear();
        }
    }
}

static WORD_TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<([0-9A-Za-z_]+)=([^>]+)>").expect("valid regex"));
static XML_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"</?(?:function|parameter)(?:[\t\n\x0C\r ]+name="[^"]*")?>"#).expect("valid regex")
});

/// One call's name and typed arguments; `None` where Go's XML decoding fails.
pub fn parse_call(raw: &str, schemas: &[J]) -> Option<(String, Map<String, J>)> {
    // `<tag=value>` → `<tag name="escaped value">`.
    let xml = WORD_TAG.replace_all(raw, |c: &regex::Captures| {
        format!("<{} name=\"{}\">", &c[1], escape_attr(&c[2]))
    });
    // Go's decoder reads one token at a time, so text after the element is never checked.
    let mut tokens = Vec::new();
    let mut last = 0;
    for m in XML_TAG.find_iter(&xml) {
        tokens.push(Raw::Text(&xml[last..m.start()]));
        tokens.push(Raw::Tag(m.as_str()));
        last = m.end();
    }
    tokens.push(Raw::Text(&xml[last..]));
    let mut it = tokens.into_iter().map(|t| match t {
        Raw::Text(s) => text(s).map(Tok::Text),
        Raw::Tag(t) => tag(t),
    });
    // A malformed token and the end of the input both fail the call.
    let mut next = move || it.next().flatten();

    // The first element must be <function>; text before it is skipped.
    let name = loop {
        match next()? {
            Tok::Text(_) => {}
            Tok::Start(el, attr) if el == "function" => break attr.unwrap_or_default(),
            _ => return None,
        }
    };
    let props = properties(schemas, &name);
    let mut arguments = Map::new();
    loop {
        match next()? {
            Tok::Text(_) => {}
            Tok::End(el) if el == "function" => break,
            Tok::End(_) => return None,
            Tok::Start(el, attr) if el == "parameter" => {
                let key = attr.unwrap_or_default();
                let mut value = String::new();
                loop {
                    match next()? {
                        Tok::Text(s) => value.push_str(&s),
                        Tok::End(el) if el == "parameter" => break,
                        Tok::End(_) => return None,
                        Tok::Start(el, _) => skip(&mut next, &el)?,
                    }
                }
                let types = props
                    .and_then(|p| p.get(&key))
                    .map(types)
                    .unwrap_or_default();
                arguments.insert(key, typed(&value, &types));
            }
            Tok::Start(el, _) => skip(&mut next, &el)?,
        }
    }
    Some((name, arguments))
}

enum Raw<'a> {
    Text(&'a str),
    Tag(&'a str),
}

enum Tok {
    Text(String),
    Start(String, Option<String>),
    End(String),
}

/// Consumes an ignored element through its matching end tag.
fn skip(next: &mut impl FnMut() -> Option<Tok>, el: &str) -> Option<()> {
    loop {
        match next()? {
            Tok::Text(_) => {}
            Tok::Start(inner, _) => skip(next, &inner)?,
            Tok::End(end) if end == el => return Some(()),
            Tok::End(_) => return None,
        }
    }
}

/// A structural tag as Go's decoder reads it.
fn tag(t: &str) -> Option<Tok> {
    let body = &t[1..t.len() - 1];
    let (end, body) = match body.strip_prefix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let name_len = body
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(body.len());
    let (el, rest) = body.split_at(name_len);
    let attr = match rest.find("name=") {
        None => None,
        // Form feed is not XML whitespace; an end tag takes no attributes.
        Some(_) if end || rest.contains('\x0C') => return None,
        Some(i) => Some(attr_value(&rest[i + 6..rest.len() - 1])?),
    };
    Some(match end {
        true => Tok::End(el.to_string()),
        false => Tok::Start(el.to_string(), attr),
    })
}

/// Character data (escaped by Ollama, so only the character checks apply) with newlines
/// normalized.
fn text(s: &str) -> Option<String> {
    if !s.chars().all(xml_char) {
        return None;
    }
    Some(s.replace("\r\n", "\n").replace('\r', "\n"))
}

/// A quoted attribute value: entities decoded, `<` refused, newlines normalized.
fn attr_value(s: &str) -> Option<String> {
    if s.contains('<') || !s.chars().all(xml_char) {
        return None;
    }
    let s = s.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';')? + i;
        let ent = &rest[i + 1..end];
        let c = match ent {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "apos" => '\'',
            "quot" => '"',
            _ => {
                let n = match ent.strip_prefix("#x") {
                    Some(h) => u32::from_str_radix(h, 16).ok()?,
                    None => ent.strip_prefix('#')?.parse().ok()?,
                };
                char::from_u32(n).filter(|c| xml_char(*c))?
            }
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// XML 1.0 `Char`.
fn xml_char(c: char) -> bool {
    matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// Go's `xml.EscapeText` of an attribute value (characters XML cannot hold become U+FFFD).
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

/// The `properties` of the request's tool named `name`.
fn properties<'a>(schemas: &'a [J], name: &str) -> Option<&'a Map<String, J>> {
    schemas
        .iter()
        .find(|t| t.pointer("/function/name").and_then(J::as_str) == Some(name))?
        .pointer("/function/parameters/properties")?
        .as_object()
}

/// A property's types: the union of its `anyOf` members' types, else its own `type`.
fn types(p: &J) -> Vec<String> {
    let of = |v: &J| -> Vec<String> {
        match v.get("type") {
            Some(J::String(s)) => vec![s.clone()],
            Some(J::Array(a)) => a
                .iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        }
    };
    match p
        .get("anyOf")
        .and_then(J::as_array)
        .filter(|a| !a.is_empty())
    {
        Some(a) => a.iter().flat_map(of).collect(),
        None => of(p),
    }
}

/// A parameter's text typed by its schema types (Ollama's `parseValue`).
fn typed(raw: &str, types: &[String]) -> J {
    let raw = raw.strip_prefix('\n').unwrap_or(raw);
    let raw = raw.strip_suffix('\n').unwrap_or(raw);
    let string = || J::String(raw.to_string());
    if raw.to_lowercase() == "null" {
        return J::Null;
    }
    if types.is_empty() {
        return string();
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
        if let Ok(i) = raw.parse::<i64>() {
            return J::from(i);
        }
        if only {
            return string();
        }
    }
    if has("number") {
        if let Some(f) = go_float(raw) {
            if f == f.trunc() {
                // Go's int64(f) on amd64: out of range gives the minimum.
                let i = if f.abs() < 2f64.powi(63) {
                    f as i64
                } else {
                    i64::MIN
                };
                return J::from(i);
            }
            return J::from(f);
        }
        if only {
            return string();
        }
    }
    if has("array") {
        match serde_json::from_str::<J>(raw) {
            Ok(J::Array(a)) => return J::Array(a.into_iter().map(go_map).collect()),
            Ok(J::Null) => return J::Null,
            _ if only => return string(),
            _ => {}
        }
    }
    if has("object") {
        match serde_json::from_str::<J>(raw) {
            Ok(o @ J::Object(_)) => return go_map(o),
            Ok(J::Null) => return J::Null,
            _ => {}
        }
    }
    string()
}

/// A decoded `any`: maps become Go maps (sorted keys).
pub fn go_map(v: J) -> J {
    match v {
        J::Object(o) => J::Object(
            o.into_iter()
                .map(|(k, v)| (k, go_map(v)))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect(),
        ),
        J::Array(a) => J::Array(a.into_iter().map(go_map).collect()),
        v => v,
    }
}

#[cfg(test)]
#[path = "nemotron_tools_tests.rs"]
mod tests;
