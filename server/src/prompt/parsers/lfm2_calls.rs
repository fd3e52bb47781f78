//! LFM2's Python-style tool calls (Ollama's `parsePythonStyleToolCalls`):
//! `[name(key='value', n=1, flag=True, items=[1, 2]), other()]`, the brackets optional.
//!
//! A quoted value is the text between its quotes as written (escapes are not undone); an
//! unquoted one reads `true`/`True`, `false`/`False`, `null`/`None`, an integer, a float, a JSON
//! (or Python-literal: single quotes, `True`/`False`/`None`) list or object, and is otherwise
//! the bare text. Function names are whatever precedes the parenthesis.

use serde_json::{Map, Value as J};

use super::govalue;

pub const CALL_START: &str = "<|tool_call_start|>";
pub const CALL_END: &str = "<|tool_call_end|>";

/// The calls in one `<|tool_call_start|>…<|tool_call_end|>` body; `None` when it does not
/// parse or holds no call.
pub fn parse_calls(content: &str) -> Option<Vec<(String, Map<String, J>)>> {
    let c = content.trim();
    let c = c.strip_prefix(CALL_START).unwrap_or(c).trim();
    let c = c.strip_suffix(CALL_END).unwrap_or(c).trim();
    let mut rest = match c.strip_prefix('[').and_then(|c| c.strip_suffix(']')) {
        Some(inner) => inner,
        None => c,
    };
    let mut calls = Vec::new();
    loop {
        rest = rest.trim();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim();
        }
        if rest.is_empty() {
            break;
        }
        let open = rest.find('(')?;
        let name = rest[..open].trim();
        if name.is_empty() {
            return None;
        }
        let close = matching_paren(rest, open)?;
        let mut args = Map::new();
        parse_args(&rest[open + 1..close], &mut args)?;
        calls.push((name.to_string(), args));
        rest = &rest[close + 1..];
    }
    (!calls.is_empty()).then_some(calls)
}

/// The `)` closing the `(` at `open`, skipping quoted strings.
fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let (mut depth, mut i) = (1, open + 1);
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Go's `unicode.IsSpace` of a byte read as a rune (Latin-1).
fn space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0x85 | 0xa0)
}

/// `key=value` pairs separated by commas.
fn parse_args(s: &str, args: &mut Map<String, J>) -> Option<()> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b',' || space(b[i])) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let key_start = i;
        while i < b.len() && b[i] != b'=' && b[i] != b',' {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            return None;
        }
        let key = s[key_start..i].trim();
        if key.is_empty() {
            return None;
        }
        i += 1;
        while i < b.len() && space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            return None;
        }
        let (value, next) = arg_value(s, i)?;
        args.insert(key.to_string(), value);
        i = next;
        if i < b.len() && b[i] == b',' {
            i += 1;
        }
    }
    Some(())
}

/// The value starting at `i` and where it ends; `None` for an unterminated quoted string.
fn arg_value(s: &str, mut i: usize) -> Option<(J, usize)> {
    let b = s.as_bytes();
    if let q @ (b'\'' | b'"') = b[i] {
        i += 1;
        let start = i;
        while i < b.len() {
            if b[i] == b'\\' && i + 1 < b.len() {
                i += 2;
                continue;
            }
            if b[i] == q {
                return Some((J::String(s[start..i].to_string()), i + 1));
            }
            i += 1;
        }
        return None;
    }
    // Unquoted: up to a comma outside brackets and strings.
    let start = i;
    let (mut paren, mut square, mut curly) = (0, 0, 0);
    let (mut quote, mut escaped) = (None::<u8>, false);
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            b'\'' | b'"' => quote = Some(c),
            b'(' => paren += 1,
            b')' => paren = (paren - 1).max(0),
            b'[' => square += 1,
            b']' => square = (square - 1).max(0),
            b'{' => curly += 1,
            b'}' => curly = (curly - 1).max(0),
            b',' if paren == 0 && square == 0 && curly == 0 => break,
            _ => {}
        }
        i += 1;
    }
    Some((literal(s[start..i].trim()), i))
}

/// An unquoted value (Ollama's `parsePythonLiteral`).
fn literal(token: &str) -> J {
    match token {
        "true" | "True" => return J::Bool(true),
        "false" | "False" => return J::Bool(false),
        "null" | "None" => return J::Null,
        _ => {}
    }
    if let Ok(i) = token.parse::<i64>() {
        return J::from(i);
    }
    if let Some(f) = govalue::parse_finite(token) {
        return govalue::float(f);
    }
    if token.starts_with('[') || token.starts_with('{') {
        let json = govalue::decode(token)
            .or_else(|| python_to_json(token).and_then(|j| govalue::decode(&j)));
        if let Some(v) = json {
            return govalue::any(v);
        }
    }
    J::String(token.to_string())
}

/// Python literal → JSON text: single-quoted strings double-quoted, `True`/`False`/`None`
/// outside strings; `None` for an unterminated string.
fn python_to_json(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len() + b.len() / 8);
    let (mut quote, mut escaped) = (None::<u8>, false);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if escaped {
                out.push(c);
                escaped = false;
            } else if c == b'\\' {
                out.push(c);
                escaped = true;
            } else if c == q {
                out.push(b'"');
                quote = None;
            } else if q == b'\'' && c == b'"' {
                out.extend_from_slice(b"\\\"");
            } else {
                out.push(c);
            }
            i += 1;
            continue;
        }
        if c == b'\'' || c == b'"' {
            quote = Some(c);
            out.push(b'"');
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let end = b[i..]
                .iter()
                .position(|x| !(x.is_ascii_alphanumeric() || *x == b'_'))
                .map_or(b.len(), |n| i + n);
            out.extend_from_slice(match &s[i..end] {
                "True" => b"true",
                "False" => b"false",
                "None" => b"null",
                ident => ident.as_bytes(),
            });
            i = end;
            continue;
        }
        out.push(c);
        i += 1;
    }
    if quote.is_some() {
        return None;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(s: &str) -> (String, J) {
        let mut calls = parse_calls(s).unwrap_or_else(|| panic!("{s}"));
        assert_eq!(calls.len(), 1, "{s}");
        let (name, args) = calls.remove(0);
        (name, J::Object(args))
    }

    #[test]
    fn calls_and_lists_of_calls() {
        let got: Vec<String> = parse_calls(
            " <|tool_call_start|>[get_weather(city='Paris'), , now() ,add(a=1)]<|tool_call_end|> ",
        )
        .unwrap()
        .into_iter()
        .map(|(n, a)| format!("{n}{}", J::Object(a)))
        .collect();
        // One comma is skipped between calls; a second one becomes part of the next name.
        assert_eq!(
            got,
            [r#"get_weather{"city":"Paris"}"#, ", now{}", r#"add{"a":1}"#]
        );
        assert_eq!(
            one("bash(command='ls -la')"),
            ("bash".into(), json!({"command": "ls -la"}))
        );
        assert_eq!(one("ns.tool v2 (x=1)").0, "ns.tool v2");
        for bad in [
            "",
            "[]",
            "no_paren",
            "(x=1)",
            "f(x=1",
            "f(x=1) junk",
            "f(x)",
            "f(=1)",
            "f(x=)",
            "f(x='open)",
            "f(x=1)g",
        ] {
            assert!(parse_calls(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn values_read_as_ollama() {
        let (_, args) = one(
            r#"f(s='it\'s', d="a, (b)", yes=True, no=false, n=None, i=-3, x=2.5, e=1e3, j=[1, {"z": 2, "a": "b"}], p={'k': True, 'q': 'say "hi"'}, bad=[1, x], bare=hello world, empty='', paren=g(1, 2))"#,
        );
        assert_eq!(
            args,
            json!({"s": "it\\'s", "d": "a, (b)", "yes": true, "no": false, "n": null, "i": -3,
                "x": 2.5, "e": 1000, "j": [1, {"a": "b", "z": 2}], "p": {"k": true, "q": "say \"hi\""},
                "bad": "[1, x]", "bare": "hello world", "empty": "", "paren": "g(1, 2)"})
        );
        let keys: Vec<String> = args.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys[..3], ["s", "d", "yes"]);
        assert_eq!(one("f(a=1,,b = 'x' ,)").1, json!({"a": 1, "b": "x"}));
        assert_eq!(one("f(u='é, ü')").1, json!({"u": "é, ü"}));
    }
}
