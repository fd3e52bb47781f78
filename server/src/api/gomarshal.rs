//! Go's `json.Marshal` text for tool-call arguments, which Ollama returns as Go prints its
//! `any` values (api/types.go `ToolCallFunctionArguments.MarshalJSON`; the OpenAI and Anthropic
//! layers marshal the same map into their `arguments` string and `input`).
//!
//! Owns one rule: how a float64 prints ([`float_text`], encoding/json's `floatEncoder`). The
//! parsers already made every argument number what Go holds (`govalue::any`: a float64, carried
//! as an integer `serde_json` number when it is whole and fits); only the floats that stay
//! `f64` print differently from `serde_json`'s shortest form (`1e21` → `1e+21`, `1.5e-6` →
//! `0.0000015`, `1e20` → `100000000000000000000`), so [`Go`] writes those as raw JSON text.
//! Raw text needs `serde_json`'s serializer (every response body and argument string is
//! written by it); another serializer, or `serde_json::to_value`, gets the same number back.

use serde::ser::{Error as _, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A float64 as Go's encoding/json writes it: plain decimal with the shortest round-trip
/// digits, except exponent form below 1e-6 or from 1e21 up (`strconv` 'e' with a signed
/// exponent of at least two digits, whose `e-0N` encoding/json shortens to `e-N`). `None` for
/// NaN and ±Inf, which Go refuses to marshal.
pub fn float_text(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` gives the same shortest digits with a bare exponent (`1.5e-7`, `1e21`).
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e')?;
        let exp: i32 = exp.parse().ok()?;
        return Some(if exp < 0 {
            format!("{mantissa}e-{}", -exp)
        } else {
            format!("{mantissa}e+{exp:02}")
        });
    }
    // Rust's `{}` never uses an exponent and prints the shortest round-trip digits, padded with
    // zeros (`100000000000000000000`), and `-0` for negative zero, as Go does.
    Some(format!("{f}"))
}

/// A JSON value serialized with every float64 in Go's text ([`float_text`]).
pub struct Go<'a>(pub &'a Value);

impl Serialize for Go<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Number(n) if n.is_f64() => match n.as_f64().and_then(float_text) {
                Some(text) => RawValue::from_string(text)
                    .map_err(S::Error::custom)?
                    .serialize(s),
                None => n.serialize(s),
            },
            Value::Array(items) => s.collect_seq(items.iter().map(Go)),
            Value::Object(m) => s.collect_map(m.iter().map(|(k, v)| (k, Go(v)))),
            v => v.serialize(s),
        }
    }
}

/// `serialize_with` for an arguments map: Go's text ([`Go`]).
pub fn arguments<S: Serializer>(m: &Map<String, Value>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, v)| (k, Go(v))))
}

/// An arguments map as the JSON string Go's `json.Marshal` makes of it (OpenAI's `arguments`,
/// Anthropic's streamed `partial_json`).
pub fn arguments_string(m: &Map<String, Value>) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    // Writing to a Vec cannot fail, and every value is already valid JSON.
    if arguments(m, &mut ser).is_err() {
        return Value::Object(m.clone()).to_string();
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_as_go_encoding_json() {
        // Expected texts are Go's `json.Marshal(float64(x))`.
        for (f, want) in [
            (1.0, "1"),
            (-0.0, "-0"),
            (0.0, "0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (1e-6, "0.000001"),
            (1.5e-6, "0.0000015"),
            (9.99e-7, "9.99e-7"),
            (1e-7, "1e-7"),
            (1.5e-10, "1.5e-10"),
            (5e-324, "5e-324"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e21, "1e+21"),
            (-1.5e21, "-1.5e+21"),
            (1.2345678901234568e22, "1.2345678901234568e+22"),
            (1e100, "1e+100"),
            (f64::MAX, "1.7976931348623157e+308"),
            (9007199254740993.0, "9007199254740992"),
            (18446744073709551615.0, "18446744073709552000"),
        ] {
            assert_eq!(float_text(f).as_deref(), Some(want), "{f:e}");
        }
        assert_eq!(float_text(f64::NAN), None);
        assert_eq!(float_text(f64::INFINITY), None);
    }

    #[test]
    fn arguments_print_floats_as_go_and_keep_the_rest() {
        let m = json!({"b": 1e21, "a": [1.5e-6, 7, -3, {"x": 1e20}], "s": "1e21", "n": null});
        let m = m.as_object().unwrap();
        assert_eq!(
            arguments_string(m),
            r#"{"b":1e+21,"a":[0.0000015,7,-3,{"x":100000000000000000000}],"s":"1e21","n":null}"#
        );
        // Through a struct field, as the native API writes tool calls.
        #[derive(serde::Serialize)]
        struct F {
            #[serde(serialize_with = "arguments")]
            arguments: Map<String, Value>,
        }
        let m = json!({"v": 1e-7}).as_object().unwrap().clone();
        assert_eq!(
            serde_json::to_string(&F { arguments: m }).unwrap(),
            r#"{"arguments":{"v":1e-7}}"#
        );
    }
}
