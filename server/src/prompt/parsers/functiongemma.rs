//! FunctionGemma output, Ollama's `FunctionGemmaParser`, for the parser name `functiongemma`
//! (tools, no thinking): text is content; `<start_function_call>call:NAME{key:value,…}
//! <end_function_call>` is a call. Values: `<escape>…<escape>` strings, `true`/`false`,
//! numbers (an exact int64, else whatever float Go's `Sscanf("%f")` reads from the start of
//! the value), `[…]` arrays (an empty one is null, as Go marshals a nil slice), `{…}` objects,
//! anything else a string as written (keys and values are not trimmed).
//!
//! Kept from Ollama: the call is whatever the first `call:NAME{…}` on one line inside the tags
//! matches (a body that does not match gives a call with an empty name and no arguments); a
//! call never closed, and a partial opening tag at the very end of the output, are dropped.
//! Chunking: Ollama, given one chunk that closes a call and opens the next, swallows the text
//! between the two; herd delivers it as content, as Ollama does when they arrive apart (token
//! by token), so that every chunking gives the same result. A value of exactly `<escape>`
//! (Ollama slices out of range and panics) reads as an empty string; a float token Go reads
//! as NaN or ±Inf (`nan…`, `inf…`), which JSON cannot carry, stays a string.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value as J};

use super::{govalue, partial_tag_len, Parsed, Parser};

const OPEN: &str = "<start_function_call>";
const CLOSE: &str = "<end_function_call>";
const ESCAPE: &str = "<escape>";

pub struct FunctionGemma {
    in_call: bool,
    buf: String,
    index: i64,
}

impl FunctionGemma {
    pub fn new() -> FunctionGemma {
        FunctionGemma {
            in_call: false,
            buf: String::new(),
            index: 0,
        }
    }
}

impl Default for FunctionGemma {
    fn default() -> Self {
        Self::new()
    }
}

impl Parser for FunctionGemma {
    fn add(&mut self, chunk: &str, _done: bool) -> Parsed {
        self.buf.push_str(chunk);
        let mut out = Parsed::default();
        loop {
            if !self.in_call {
                if let Some(i) = self.buf.find(OPEN) {
                    out.content.push_str(&self.buf[..i]);
                    self.buf.drain(..i + OPEN.len());
                    self.in_call = true;
                    continue;
                }
                // A partial tag waits, even at the end (Ollama never flushes it).
                let keep = partial_tag_len(&self.buf, &[OPEN]);
                let emit = self.buf.len() - keep;
                out.content.push_str(&self.buf[..emit]);
                self.buf.drain(..emit);
                return out;
            }
            let Some(i) = self.buf.find(CLOSE) else {
                return out;
            };
            let (name, arguments) = parse_call(&self.buf[..i]);
            out.push_call(&mut self.index, name, arguments);
            self.buf.drain(..i + CLOSE.len());
            self.in_call = false;
        }
    }

    fn thinking_close(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Ollama's `call:([^{]+)\{(.*)\}` (`.` stops at a newline): the name and the arguments.
fn parse_call(body: &str) -> (String, Map<String, J>) {
    static CALL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"call:([^{]+)\{(.*)\}").expect("static pattern"));
    let Some(c) = CALL.captures(body) else {
        return (String::new(), Map::new());
    };
    let mut args = Map::new();
    for part in split(&c[2]) {
        if let Some((k, v)) = part.split_once(':') {
            args.insert(k.to_string(), value(v));
        }
    }
    (c[1].to_string(), args)
}

/// Splits at commas outside brackets and `<escape>` strings; empty parts are dropped.
fn split(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut parts = Vec::new();
    let (mut depth, mut escaped, mut start, mut i) = (0i64, false, 0, 0);
    while i < b.len() {
        if b[i..].starts_with(ESCAPE.as_bytes()) {
            escaped = !escaped;
            i += ESCAPE.len();
            continue;
        }
        if !escaped {
            match b[i] {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                b',' if depth == 0 => {
                    if i > start {
                        parts.push(&s[start..i]);
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if b.len() > start {
        parts.push(&s[start..]);
    }
    parts
}

/// `parseValue`.
fn value(v: &str) -> J {
    if v.starts_with(ESCAPE) && v.ends_with(ESCAPE) {
        return J::String(
            v.get(ESCAPE.len()..v.len() - ESCAPE.len())
                .unwrap_or("")
                .to_string(),
        );
    }
    match v {
        "true" => return J::Bool(true),
        "false" => return J::Bool(false),
        _ => {}
    }
    if let Some(n) = v.parse::<i64>().ok().filter(|n| n.to_string() == v) {
        return J::from(n);
    }
    if let Some(f) = scan_float(v) {
        return govalue::float(f);
    }
    if let Some(inner) = v.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        let items: Vec<J> = split(inner).into_iter().map(value).collect();
        return if items.is_empty() {
            J::Null
        } else {
            J::Array(items)
        };
    }
    if let Some(inner) = v.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
        // A Go map: sorted keys, the last of a repeated key wins.
        let mut m: Vec<(String, J)> = Vec::new();
        for part in split(inner) {
            if let Some((k, x)) = part.split_once(':') {
                m.retain(|(key, _)| key != k);
                m.push((k.to_string(), value(x)));
            }
        }
        m.sort_by(|a, b| a.0.cmp(&b.0));
        return J::Object(m.into_iter().collect());
    }
    J::String(v.to_string())
}

/// Go's `fmt.Sscanf(s, "%f", &f)`: leading spaces skipped (a newline fails), then the longest
/// float-looking token (`fmt`'s `floatToken`), read by `strconv.ParseFloat` (a `p` binary
/// exponent by `fmt` itself); whatever follows is ignored. Hex mantissas are not read.
fn scan_float(s: &str) -> Option<f64> {
    let mut rest = s;
    loop {
        let c = rest.chars().next()?;
        if c == '\n' || rest.starts_with("\r\n") {
            return None;
        }
        if !c.is_whitespace() {
            break;
        }
        rest = &rest[c.len_utf8()..];
    }
    let b = rest.as_bytes();
    let mut i = 0;
    let mut accept = |set: &[u8]| -> bool {
        match b.get(i) {
            Some(c) if set.contains(c) => {
                i += 1;
                true
            }
            _ => false,
        }
    };
    // NaN and Inf read as floats JSON cannot hold; those stay strings.
    if accept(b"nN") && accept(b"aA") && accept(b"nN") {
        return None;
    }
    accept(b"+-");
    if accept(b"iI") && accept(b"nN") && accept(b"fF") {
        return None;
    }
    let digits: &[u8] = b"0123456789_";
    if accept(b"0") && accept(b"xX") {
        return None;
    }
    while accept(digits) {}
    if accept(b".") {
        while accept(digits) {}
    }
    if accept(b"eEpP") {
        accept(b"+-");
        while accept(digits) {}
    }
    let token = &rest[..i];
    let f = match token.split_once('p') {
        Some((mantissa, exp)) => {
            let m = govalue::parse_finite(mantissa)?;
            let e: i32 = exp.parse().ok()?;
            m * 2f64.powi(e)
        }
        None => govalue::parse_finite(token)?,
    };
    f.is_finite().then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::parsers::testutil;
    use serde_json::json;

    fn check(output: &str, content: &str, calls: &[(&str, J)]) {
        testutil::check(FunctionGemma::new, output, (content, "", calls));
    }

    #[test]
    fn content_and_calls_under_every_split() {
        check(
            "Hello <start world <value>",
            "Hello <start world <value>",
            &[],
        );
        check("Hi <start_function", "Hi ", &[]);
        check(
            "こんにちは <start_function_call>call:greet{name:<escape>日本語, a:b<escape>}<end_function_call>Done!",
            "こんにちは Done!",
            &[("greet", json!({"name": "日本語, a:b"}))],
        );
        check(
            "<start_function_call>call:first{}<end_function_call>text<start_function_call>call:second{n:1}<end_function_call>",
            "text",
            &[("first", json!({})), ("second", json!({"n": 1}))],
        );
        check("<start_function_call>call:never{closed:1}", "", &[]);
        check(
            "<start_function_call>oops<end_function_call>x",
            "x",
            &[("", json!({}))],
        );
    }

    #[test]
    fn values_as_ollama_reads_them() {
        let body = "call:f{s:<escape>x, {y}<escape>,i:10,neg:-3,big:99999999999999999999,f:2.5,sp: 5,pre:+7,z:007,\
            trail:2.5kg,word:Paris,nan:nancy,inf:-infinity,e:1e5,p:1.5p2,u:1_000,b:true,B:True,\
            arr:[1,<escape>a,b<escape>,[]],empty:[],obj:{z:1,a:{k:v},z:2},raw:\"q\",:c,novalue,e2:<escape>}";
        let (name, args) = parse_call(body);
        assert_eq!(name, "f");
        let want = json!({
            "s": "x, {y}", "i": 10, "neg": -3, "big": 100000000000000000000.0, "f": 2.5,
            "sp": 5, "pre": 7, "z": 7, "trail": 2.5, "word": "Paris", "nan": "nancy",
            "inf": "-infinity", "e": 100000, "p": 6, "u": 1000, "b": true, "B": "True",
            "arr": [1, "a,b", null], "empty": null, "obj": {"a": {"k": "v"}, "z": 2},
            "raw": "\"q\"", "": "c", "e2": ""
        });
        assert_eq!(J::Object(args.clone()), want);
        // Keys in the model's order.
        assert_eq!(args.keys().next().map(String::as_str), Some("s"));
        // The name is taken as written; `.` stops at a newline, so a multi-line body misses.
        assert_eq!(parse_call("x call: f {a:1}").0, " f ");
        assert_eq!(
            parse_call("call:f{a:<escape>1\n2<escape>}"),
            (String::new(), Map::new())
        );
        // The arguments run to the last `}` of the line; a number is read from the start.
        assert_eq!(
            parse_call("call:f{a:1}} tail}").1,
            json!({"a": 1}).as_object().cloned().unwrap()
        );
        assert_eq!(value("\n5"), json!("\n5"));
        assert_eq!(value(" \t-2.5e1x"), json!(-25));
    }
}
