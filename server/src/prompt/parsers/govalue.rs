//! Go's value rules, as they show in what Ollama's parsers return, owned here for every parser:
//! numbers read as Go reads them ([`parse_float`]: `strconv.ParseFloat`; [`int64`]: Go's
//! `int64(f)`), a float64 in JSON as Go's `json.Marshal` prints it ([`float`]), JSON decoded into
//! Go's `any` and printed back ([`any`]: maps with sorted keys, every number a float64), and tool
//! calls decoded by `json.Unmarshal` into Ollama's API types ([`arguments`]:
//! `api.ToolCallFunctionArguments`; [`function`]: a `{name, arguments}` struct or
//! `api.ToolCallFunction`).
//!
//! herd's tool-call arguments are `serde_json` values, so a Go value is carried by the
//! `serde_json` value that prints the same (or, where none does, the same number).

use serde_json::{Map, Number, Value as J};

/// Go's `int64(f)` on amd64: truncation, and the minimum for anything out of range (NaN and ±Inf
/// too).
pub fn int64(f: f64) -> i64 {
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
        f as i64
    } else {
        i64::MIN
    }
}

/// A float64 as JSON, printing as Go's `json.Marshal` prints it where a `serde_json` number can:
/// a whole value below 1e21 is Go's shortest round-trip digits padded with zeros (Rust's `{}`
/// gives the same digits), as an integer when i64 or u64 holds it; `-0` stays a float (Go prints
/// `-0`); other values are floats. NaN and ±Inf, which Go cannot marshal, become `null`.
pub fn float(f: f64) -> J {
    if f.trunc() == f && f.abs() < 1e21 && !(f == 0.0 && f.is_sign_negative()) {
        let digits = format!("{f}");
        if let Ok(i) = digits.parse::<i64>() {
            return J::from(i);
        }
        if let Ok(u) = digits.parse::<u64>() {
            return J::from(u);
        }
    }
    Number::from_f64(f).map_or(J::Null, J::Number)
}

/// A JSON value as Go decodes it into `any` and prints it again: object keys sorted (Go maps),
/// every number a float64 ([`float`]).
pub fn any(v: J) -> J {
    match v {
        J::Object(m) => {
            let mut entries: Vec<(String, J)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            J::Object(entries.into_iter().map(|(k, v)| (k, any(v))).collect())
        }
        J::Array(a) => J::Array(a.into_iter().map(any).collect()),
        J::Number(n) => n.as_f64().map_or(J::Number(n), float),
        v => v,
    }
}

/// Go's `json.Unmarshal` of one JSON text (nothing but whitespace after it) into `any`, as a
/// `serde_json` value with the numbers as written (callers that print them as Go does apply
/// [`any`]). Where Go and `serde_json` disagree it reads as Go does: a `\u` escape of a UTF-16
/// surrogate that is not half of a valid pair decodes to U+FFFD (`serde_json` refuses the
/// text), and a number outside float64's range fails the whole text (`None`, as Go's
/// `UnmarshalTypeError` does; `serde_json` agrees). Every parser decoding what a model wrote
/// goes through here, so a tool call whose arguments hold `"\ud800"` is the call Ollama returns.
pub fn decode(text: &str) -> Option<J> {
    serde_json::from_str(&go_surrogates_str(text)).ok()
}

/// `text` with every `\u` escape of a surrogate that does not start a valid pair
/// ([`go_surrogates`]).
fn go_surrogates_str(text: &str) -> std::borrow::Cow<'_, str> {
    match go_surrogates(text.as_bytes()) {
        std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(text),
        // Only ASCII escapes were replaced, by ASCII escapes: still UTF-8.
        std::borrow::Cow::Owned(b) => {
            std::borrow::Cow::Owned(String::from_utf8(b).unwrap_or_else(|_| text.to_owned()))
        }
    }
}

/// JSON text `b` with every `\u` escape of a surrogate that does not start a valid pair
/// (`\uD800`–`\uDBFF` followed by a `\uDC00`–`\uDFFF` escape) replaced by `\ufffd`, which is
/// what Go's decoder makes of it (encoding/json `unquote`: an invalid surrogate is the
/// replacement rune, and the escape after it is read on its own) and what `serde_json` refuses.
/// Other escapes are stepped over whole, so the `\\` in `\\ud800` (a backslash, then the text
/// `ud800`) is never mistaken for the start of an escape. Outside strings a backslash is a
/// syntax error either way, so rewriting there changes nothing; each replacement is as long as
/// what it replaces, so positions stay put. Borrowed when nothing is replaced. Request bodies
/// (`api::error::decode_json`) and model output decoded by the parsers both go through here.
pub fn go_surrogates(b: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    // The code unit of a `\uXXXX` escape at `i`.
    let unit = |i: usize| -> Option<u16> {
        match b.get(i..i + 6)? {
            [b'\\', b'u', hex @ ..] if hex.iter().all(u8::is_ascii_hexdigit) => {
                u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
            }
            _ => None,
        }
    };
    let (mut out, mut copied, mut i) = (Vec::new(), 0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            // Any other escape: the backslash and the byte it escapes.
            i += 2;
            continue;
        };
        let pair = (0xD800..0xDC00).contains(&u)
            && unit(i + 6).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
        if pair {
            i += 12;
        } else {
            if (0xD800..0xE000).contains(&u) {
                out.extend_from_slice(&b[copied..i]);
                out.extend_from_slice(b"\\ufffd");
                copied = i + 6;
            }
            i += 6;
        }
    }
    if out.is_empty() {
        // Nothing replaced (a replacement always writes `\ufffd`).
        return std::borrow::Cow::Borrowed(b);
    }
    out.extend_from_slice(&b[copied..]);
    std::borrow::Cow::Owned(out)
}

/// Go's `json.Unmarshal` into `api.ToolCallFunctionArguments`: a JSON object (nothing after it),
/// top-level keys in the model's order (a repeated key keeps its first place and its last value),
/// values as [`any`]; `null` is no arguments; anything else fails (`None`).
pub fn arguments(text: &str) -> Option<Map<String, J>> {
    match decode(text)? {
        J::Object(m) => Some(object(m)),
        J::Null => Some(Map::new()),
        _ => None,
    }
}

fn object(m: Map<String, J>) -> Map<String, J> {
    m.into_iter().map(|(k, v)| (k, any(v))).collect()
}

/// How [`call`] reads a call's `arguments` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arguments {
    /// Ollama's `api.ToolCallFunctionArguments`: an object; `null` leaves it empty.
    Map,
    /// An ordered-map field that `null` fails as well (laguna's `lagunaToolCall`).
    Strict,
    /// The struct has no such field: ignored like any other.
    Ignored,
}

/// Go's `json.Unmarshal` of a call into a struct with `name` and `arguments` fields, and with
/// `index`, an int, too when `index` is set (`api.ToolCallFunction`): field names match in any
/// case, a later one wins, other fields are ignored, `null` leaves a field (or the whole call)
/// empty; a field of the wrong type fails (`None`).
pub fn function(text: &str, index: bool) -> Option<(String, Map<String, J>)> {
    call(text, index, Arguments::Map)
}

/// [`function`] with the `arguments` field read by `arguments`.
pub fn call(text: &str, index: bool, arguments: Arguments) -> Option<(String, Map<String, J>)> {
    let fields = match decode(text)? {
        J::Null => return Some((String::new(), Map::new())),
        J::Object(o) => o,
        _ => return None,
    };
    let (mut name, mut args) = (String::new(), Map::new());
    for (key, value) in fields {
        if key.eq_ignore_ascii_case("name") {
            match value {
                J::String(s) => name = s,
                J::Null => {}
                _ => return None,
            }
        } else if arguments != Arguments::Ignored && key.eq_ignore_ascii_case("arguments") {
            match (value, arguments) {
                (J::Object(m), _) => args = object(m),
                (J::Null, Arguments::Map) => args = Map::new(),
                _ => return None,
            }
        } else if index && key.eq_ignore_ascii_case("index") && !(value.is_null() || value.is_i64())
        {
            return None;
        }
    }
    Some((name, args))
}

/// [`parse_float`]'s finite results: the spellings of NaN and ±Inf Go also reads give values JSON
/// cannot carry (Ollama fails the response), so parsers that would return the float as it is
/// keep such text as text.
pub fn parse_finite(s: &str) -> Option<f64> {
    parse_float(s).filter(|f| f.is_finite())
}

/// Go's `strconv.ParseFloat(s, 64)`: decimal and hexadecimal (`0x1.8p3`) forms, `_` between
/// digits, `inf`/`infinity`/`nan` in any case; out of range is an error (`None`).
pub fn parse_float(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower == "nan" && body.len() == s.len() {
        return Some(f64::NAN);
    }
    if body.contains('_') && !underscores_ok(s) {
        return None;
    }
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    let v = if let Some(hex) = clean
        .strip_prefix("0x")
        .or_else(|| clean.strip_prefix("0X"))
    {
        hex_float(hex)?
    } else {
        let b = clean.as_bytes();
        let mut i = 0;
        let digits = |i: &mut usize| {
            let start = *i;
            while *i < b.len() && b[*i].is_ascii_digit() {
                *i += 1;
            }
            *i - start
        };
        let mut n = digits(&mut i);
        if i < b.len() && b[i] == b'.' {
            i += 1;
            n += digits(&mut i);
        }
        if n == 0 {
            return None;
        }
        if i < b.len() && (b[i] | 0x20) == b'e' {
            i += 1;
            if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return None;
            }
        }
        if i != b.len() {
            return None;
        }
        clean.parse::<f64>().ok()?
    };
    if v.is_infinite() {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// Hex mantissa with optional point and a mandatory binary exponent (`1.8p3`). Mantissas beyond
/// 60 bits are truncated, not rounded (Go rounds them; no model writes such numbers).
fn hex_float(s: &str) -> Option<f64> {
    let (mant, exp) = s.split_once(['p', 'P'])?;
    let (negative, digits) = match exp.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, exp.strip_prefix('+').unwrap_or(exp)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let exp: i64 = digits.parse::<i64>().unwrap_or(100_000).min(100_000);
    let exp = if negative { -exp } else { exp };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let all = || int.chars().chain(frac.chars());
    if int.len() + frac.len() == 0 || !all().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut m: u64 = 0;
    let mut e = exp - 4 * frac.len() as i64;
    for c in all() {
        if m >> 56 == 0 {
            m = m * 16 + u64::from(c.to_digit(16).unwrap_or(0));
        } else {
            e += 4;
        }
    }
    let mut v = m as f64;
    while e != 0 && v != 0.0 && v.is_finite() {
        let k = e.clamp(-1000, 1000);
        v *= 2f64.powi(k as i32);
        e -= k;
    }
    Some(v)
}

/// Go's `underscoreOK`: `_` only between digits (or after a base prefix).
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let (mut i, mut saw, hex) =
        if b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'b' | b'o' | b'x') {
            (2, b'0', b[1] | 0x20 == b'x')
        } else {
            (0, b'^', false)
        };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_parse_as_gos_parse_float() {
        let ok = [
            ("1_23.50_0_0e+1_2", 1.235e14),
            ("0x_1_2.3_4_5p+1_2", 74565.0),
            ("0x1p-2", 0.25),
            (".5", 0.5),
            ("5.", 5.0),
            ("-1E3", -1000.0),
            ("+0.1", 0.1),
            ("1e-400", 0.0),
        ];
        for (s, want) in ok {
            assert_eq!(parse_float(s), Some(want), "{s}");
        }
        assert_eq!(parse_float("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(parse_float("nAn").is_some_and(f64::is_nan));
        for bad in [
            "",
            ".",
            "e5",
            "1e",
            "1e+",
            "+nan",
            "infin",
            "-_123.5e+12",
            "1__23.5",
            "123_.5",
            "123._5",
            "123.5e+12_",
            "0x1.8",
            "0x",
            "1.5.2",
            " 1",
            "1e400",
            "0b101",
        ] {
            assert_eq!(parse_float(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn floats_print_as_go_marshals_them() {
        let cases = [
            (1000.0, json!(1000)),
            (-2.0, json!(-2)),
            (0.0, json!(0)),
            (-0.0, json!(-0.0)),
            (2.5, json!(2.5)),
            // Go prints the shortest digits that read back, not the exact value.
            (2f64.powi(60), json!(1_152_921_504_606_847_000_i64)),
            (2f64.powi(63), json!(9_223_372_036_854_776_000_u64)),
            // Beyond i64 and u64: a float (Go prints -9223372036854776000).
            (-(2f64.powi(63)), json!(-9.223_372_036_854_776e18)),
            (1e20, json!(1e20)),
            (f64::NAN, J::Null),
        ];
        for (f, want) in cases {
            assert_eq!(float(f), want, "{f}");
        }
        assert_eq!(float(1e3).to_string(), "1000");
        for (f, want) in [
            (1.9, 1),
            (-1.9, -1),
            (-9.223_372_036_854_776e18, i64::MIN),
            (9.223_372_036_854_776e18, i64::MIN),
            (f64::INFINITY, i64::MIN),
            (f64::NAN, i64::MIN),
        ] {
            assert_eq!(int64(f), want, "{f}");
        }
    }

    #[test]
    fn any_sorts_nested_maps_and_prints_numbers_as_float64s() {
        assert_eq!(
            any(json!({"z": [1.0, 1.5, {"b": 0.0, "a": -2.0}], "a": 1e3})).to_string(),
            r#"{"a":1000,"z":[1,1.5,{"a":-2,"b":0}]}"#
        );
        // Every JSON number is a float64 in Go: big integers keep 17 significant digits.
        assert_eq!(
            any(json!([
                12_345_678_901_234_567_890_u64,
                9_007_199_254_740_993_i64
            ]))
            .to_string(),
            "[12345678901234567000,9007199254740992]"
        );
        assert!(arguments("[]").is_none());
        assert!(arguments("{} x").is_none());
        assert_eq!(arguments("null"), Some(Map::new()));
        let m = arguments(r#"{"b": 1, "a": {"y": 2.0, "x": 1}, "b": 3}"#).unwrap();
        assert_eq!(J::Object(m).to_string(), r#"{"b":3,"a":{"x":1,"y":2}}"#);
    }

    #[test]
    fn functions_decode_as_gos_unmarshal() {
        let ok = [
            (
                r#"{"name": "f", "arguments": {"b": 1.0, "a": {"z": 1, "y": 2}}}"#,
                true,
                ("f", json!({"b": 1, "a": {"y": 2, "z": 1}})),
            ),
            (
                r#"{"NAME": "g", "Arguments": null, "extra": [1], "index": 3}"#,
                true,
                ("g", json!({})),
            ),
            (
                r#"{"name": "a", "name": "b", "index": null}"#,
                true,
                ("b", json!({})),
            ),
            ("null", true, ("", json!({}))),
            (r#"{"name": "f", "index": "x"}"#, false, ("f", json!({}))),
        ];
        for (text, index, (name, args)) in ok {
            let got = function(text, index).map(|(n, a)| (n, J::Object(a)));
            assert_eq!(got, Some((name.to_string(), args)), "{text}");
        }
        for bad in [
            "",
            "[1]",
            r#"{"name": 1}"#,
            r#"{"name": "f", "arguments": "{}"}"#,
            r#"{"name": "f", "index": 1.5}"#,
            r#"{"name": "f"} x"#,
        ] {
            assert_eq!(function(bad, true), None, "{bad}");
        }
    }

    /// Go's `json.Unmarshal` into `any`: an escaped surrogate that is not half of a valid pair
    /// is U+FFFD (encoding/json unquote), the escape after it read on its own; a number beyond
    /// float64 fails the text, one below its smallest is 0 (strconv.ParseFloat).
    #[test]
    fn decode_reads_as_gos_unmarshal() {
        let ok = [
            (r#""\ud800""#, json!("\u{fffd}")),
            (r#""\uDBFF""#, json!("\u{fffd}")),
            (r#""\udc00""#, json!("\u{fffd}")),
            (r#""a\ud800b""#, json!("a\u{fffd}b")),
            (r#""\ud83d\ude00""#, json!("\u{1f600}")),
            (r#""\uD83D\uDE00""#, json!("\u{1f600}")),
            (r#""\ud800\ud800""#, json!("\u{fffd}\u{fffd}")),
            (r#""\ud800\ud83d\ude00""#, json!("\u{fffd}\u{1f600}")),
            (r#""\ud800\u0041""#, json!("\u{fffd}A")),
            (r#""\udc00\ud800""#, json!("\u{fffd}\u{fffd}")),
            (r#""\ud800\n""#, json!("\u{fffd}\n")),
            // An escaped backslash before `u`: literal text, no escape.
            (r#""\\ud800""#, json!("\\ud800")),
            (r#""\\\ud800""#, json!("\\\u{fffd}")),
            (
                r#"{"\ud800": ["\udfff"]}"#,
                json!({"\u{fffd}": ["\u{fffd}"]}),
            ),
            ("[1e-400, 1e308]", json!([0.0, 1e308])),
            (" {} ", json!({})),
        ];
        for (text, want) in ok {
            assert_eq!(decode(text), Some(want), "{text}");
        }
        for bad in [
            "1e400",
            r#"{"a": -1e400}"#,
            r#"{"a": [1, 2e308]}"#,
            r#""\ud80""#,
            r#""\u""#,
            "{} {}",
            "",
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
        // Through the argument and call decoders every parser uses.
        assert_eq!(
            J::Object(arguments(r#"{"a": "\ud800"}"#).unwrap()),
            json!({"a": "\u{fffd}"})
        );
        assert_eq!(arguments(r#"{"a": 1e400}"#), None);
        assert_eq!(
            function(
                r#"{"name": "f\udc00", "arguments": {"a": "x\ud800"}}"#,
                false
            )
            .map(|(n, a)| (n, J::Object(a))),
            Some(("f\u{fffd}".into(), json!({"a": "x\u{fffd}"})))
        );
        assert_eq!(
            function(r#"{"name": "f", "arguments": {"a": 1e400}}"#, false),
            None
        );
    }
}
