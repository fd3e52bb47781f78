//! The dynamic data model templates read, mirroring the Go values Ollama hands to
//! `text/template`: Go maps (sorted iteration, missing key = zero value), Go structs (named
//! fields, missing field = error), slices, scalars, and nil. Also owns Go's printing rules
//! (`fmt` `%v`, `Stringer`s) and `encoding/json` compact output, because both decide bytes of the
//! rendered prompt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub enum Value {
    /// Go's untyped nil / a missing map entry (`missingkey=zero` of an `any` element).
    #[default]
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
    List(Arc<GoList>),
    Map(Arc<GoMap>),
    Struct(Arc<GoStruct>),
}

/// A Go slice. `stringer_json` marks a slice type whose `String()` is its JSON (Ollama's
/// `templateTools`); it otherwise behaves as a plain slice.
#[derive(Debug, Clone, Default)]
pub struct GoList {
    pub items: Vec<Value>,
    pub stringer_json: bool,
}

impl std::ops::Deref for GoList {
    type Target = Vec<Value>;
    fn deref(&self) -> &Vec<Value> {
        &self.items
    }
}

/// A Go `map[string]T`: `range` and `json.Marshal` visit keys in sorted order.
#[derive(Debug, Clone, Default)]
pub struct GoMap {
    pub entries: BTreeMap<String, Value>,
    /// The Go type has a `String()` that returns its JSON (Ollama's `templateArgs`,
    /// `templateProperties`); an empty one prints `{}`.
    pub stringer_json: bool,
}

/// A Go struct value. `json` is what `json.Marshal` produces (tags, omitempty applied by the
/// builder); `None` means "no tags": field names become keys in declaration order.
#[derive(Debug, Clone, Default)]
pub struct GoStruct {
    /// The Go type's name where a function cares (`toTypeScriptType` wants `ToolProperty`).
    pub kind: &'static str,
    pub fields: Vec<(&'static str, Value)>,
    pub json: Option<serde_json::Value>,
    /// `String()` output if the Go type implements `fmt.Stringer`.
    pub display: Option<String>,
}

impl GoStruct {
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

impl Value {
    pub fn str(s: impl Into<Arc<str>>) -> Value {
        Value::Str(s.into())
    }

    pub fn list(v: Vec<Value>) -> Value {
        Value::List(Arc::new(GoList {
            items: v,
            stringer_json: false,
        }))
    }

    pub fn map(entries: BTreeMap<String, Value>) -> Value {
        Value::Map(Arc::new(GoMap {
            entries,
            stringer_json: false,
        }))
    }

    pub fn strukt(fields: Vec<(&'static str, Value)>) -> Value {
        Value::Struct(Arc::new(GoStruct {
            kind: "",
            fields,
            json: None,
            display: None,
        }))
    }

    /// Converts decoded JSON the way Go's `encoding/json` fills an `any`: objects become
    /// `map[string]any`, every number a `float64`.
    pub fn from_json_any(j: &serde_json::Value) -> Value {
        match j {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::str(s.as_str()),
            serde_json::Value::Array(a) => {
                Value::list(a.iter().map(Value::from_json_any).collect())
            }
            serde_json::Value::Object(o) => Value::map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json_any(v)))
                    .collect(),
            ),
        }
    }

    /// Go template truthiness: false, 0, nil, and empty strings, slices and maps are false.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.entries.is_empty(),
            Value::Struct(_) => true,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "slice",
            Value::Map(_) => "map",
            Value::Struct(_) => "struct",
        }
    }

    /// `fmt.Sprint` of one operand (`%v`).
    pub fn go_string(&self) -> String {
        let mut s = String::new();
        self.write_v(&mut s);
        s
    }

    pub fn write_v(&self, out: &mut String) {
        match self {
            Value::Nil => out.push_str("<nil>"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) => out.push_str(&format_float_g(*f)),
            Value::Str(s) => out.push_str(s),
            Value::List(l) if l.stringer_json => write_json(&self.to_json(), out),
            Value::List(l) => {
                out.push('[');
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    v.write_v(out);
                }
                out.push(']');
            }
            Value::Map(m) if m.stringer_json => {
                if m.entries.is_empty() {
                    out.push_str("{}");
                } else {
                    write_json(&self.to_json(), out);
                }
            }
            Value::Map(m) => {
                out.push_str("map[");
                for (i, (k, v)) in m.entries.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    v.write_v(out);
                }
                out.push(']');
            }
            Value::Struct(s) => match &s.display {
                Some(d) => out.push_str(d),
                None => {
                    out.push('{');
                    for (i, (_, v)) in s.fields.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        v.write_v(out);
                    }
                    out.push('}');
                }
            },
        }
    }

    /// The JSON tree `json.Marshal` would encode for this value.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Nil => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or(J::Null),
            Value::Str(s) => J::String(s.to_string()),
            // An empty `templateTools` is Ollama's nil slice (no tools sent): `null`.
            Value::List(l) if l.stringer_json && l.items.is_empty() => J::Null,
            Value::List(l) => J::Array(l.iter().map(Value::to_json).collect()),
            Value::Map(m) => J::Object(
                m.entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            Value::Struct(s) => match &s.json {
                Some(j) => j.clone(),
                None => J::Object(
                    s.fields
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_json()))
                        .collect(),
                ),
            },
        }
    }
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, which is what `%v` prints: shortest round-trip
/// digits; exponent form when the decimal exponent is < -4 or >= 6 (Go uses precision 6 for
/// that decision in shortest mode, hence `1e+06`).
pub fn format_float_g(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "d.ddde±x".
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        return go_exp(mant, exp);
    }
    format!("{f}")
}

fn go_exp(mant: &str, exp: i32) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mant}e{sign}{:02}", exp.abs())
}

/// Go's JSON number text for a float64: `'f'` format in [1e-6, 1e21), else `'e'` with a
/// two-digit-minimum exponent trimmed the way `encoding/json` does ("1e-07" → "1e-7").
fn json_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let e = format!("{f:e}");
        let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{}", exp.abs());
    }
    format!("{f}")
}

/// Compact JSON exactly as Go's `json.Marshal` writes it: HTML-safe escaping of `<`, `>`, `&`,
/// U+2028/U+2029 escaped, integral floats without a fraction.
pub fn write_json(j: &serde_json::Value, out: &mut String) {
    use serde_json::Value as J;
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => {
            if n.is_i64() || n.is_u64() {
                let _ = write!(out, "{n}");
            } else {
                out.push_str(&json_float(n.as_f64().unwrap_or(0.0)));
            }
        }
        J::String(s) => write_json_str(s, out),
        J::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(v, out);
            }
            out.push(']');
        }
        J::Object(o) => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_str(k, out);
                out.push(':');
                write_json(v, out);
            }
            out.push('}');
        }
    }
}

fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub fn json_string(j: &serde_json::Value) -> String {
    let mut s = String::new();
    write_json(j, &mut s);
    s
}
