//! The function table: Go's builtins (`not len index slice eq ne lt le gt ge print printf
//! println`; `and`/`or` live in exec because they are lazy) and Ollama's additions (`json`,
//! `currentDate`, `yesterdayDate`, `toTypeScriptType`). Errors are plain messages; exec adds the
//! position.

use std::fmt::Write as _;

use super::limits::MAX_FMT_NUM;
use super::value::{json_string, Value};

/// Why a function failed: a plain message (exec adds `error calling NAME:`) or a result that
/// would pass the execution's output cap (a limit error, reported as such).
#[derive(Debug)]
pub enum FnError {
    Msg(String),
    TooBig,
}

/// Calls `name`; no string it builds may exceed `max` bytes (checked while building, so a huge
/// width or a long argument list fails before allocating).
pub fn call(name: &str, a: &[Value], max: usize) -> Result<Value, FnError> {
    let s = match name {
        "print" => sprint(a, max),
        "println" => sprintln(a, max),
        "printf" => {
            let Some(Value::Str(f)) = a.first() else {
                return Err(FnError::Msg("printf: format must be a string".into()));
            };
            sprintf_max(f, &a[1..], max)
        }
        _ => {
            let v = call_plain(name, a).map_err(FnError::Msg)?;
            return match &v {
                Value::Str(s) if s.len() > max => Err(FnError::TooBig),
                _ => Ok(v),
            };
        }
    };
    s.map(Value::str).ok_or(FnError::TooBig)
}

/// Every name a template may call; parse rejects anything else, as Go does.
pub const NAMES: &[&str] = &[
    "and",
    "or",
    "not",
    "len",
    "index",
    "slice",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "print",
    "printf",
    "println",
    "json",
    "currentDate",
    "yesterdayDate",
    "toTypeScriptType",
];

/// The functions whose results are bounded by their inputs (printing lives in [`call`]).
fn call_plain(name: &str, a: &[Value]) -> Result<Value, String> {
    match name {
        "not" => {
            want(a, 1)?;
            Ok(Value::Bool(!a[0].truthy()))
        }
        "len" => {
            want(a, 1)?;
            Ok(Value::Int(match &a[0] {
                Value::Str(s) => s.len() as i64,
                Value::List(l) => l.len() as i64,
                Value::Map(m) => m.entries.len() as i64,
                v => return Err(format!("len of type {}", v.type_name())),
            }))
        }
        "index" => index(a),
        "slice" => slice(a),
        "eq" => {
            if a.len() < 2 {
                return Err("missing argument for comparison".into());
            }
            for b in &a[1..] {
                if equal(&a[0], b)? {
                    return Ok(Value::Bool(true));
                }
            }
            Ok(Value::Bool(false))
        }
        "ne" => {
            want(a, 2)?;
            Ok(Value::Bool(!equal(&a[0], &a[1])?))
        }
        "lt" | "le" | "gt" | "ge" => {
            want(a, 2)?;
            let o = order(&a[0], &a[1])?;
            Ok(Value::Bool(match name {
                "lt" => o.is_lt(),
                "le" => o.is_le(),
                "gt" => o.is_gt(),
                _ => o.is_ge(),
            }))
        }
        "json" => {
            want(a, 1)?;
            Ok(Value::str(json_string(&a[0].to_json())))
        }
        "currentDate" => Ok(Value::str(date_offset(0))),
        "yesterdayDate" => Ok(Value::str(date_offset(-1))),
        "toTypeScriptType" => {
            want(a, 1)?;
            Ok(Value::str(match &a[0] {
                Value::Struct(s) if s.kind == "ToolProperty" => ts_type(&a[0].to_json()),
                _ => "any".to_string(),
            }))
        }
        _ => Err(format!("function {name:?} not defined")),
    }
}

fn want(a: &[Value], n: usize) -> Result<(), String> {
    if a.len() != n {
        return Err(format!("wrong number of args: want {n} got {}", a.len()));
    }
    Ok(())
}

/// `YYYY-MM-DD` of today plus `days`. Uses UTC: the server has no reliable local offset in a
/// multi-threaded process (the `time` crate refuses it), and Ollama's is the host's zone.
fn date_offset(days: i64) -> String {
    let d = time::OffsetDateTime::now_utc().date() + time::Duration::days(days);
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// Ollama's `ToolProperty.ToTypeScriptType`, over the property's JSON form.
pub fn ts_type(p: &serde_json::Value) -> String {
    if let Some(any_of) = p
        .get("anyOf")
        .and_then(|v| v.as_array())
        .filter(|a| !a.is_empty())
    {
        return any_of.iter().map(ts_type).collect::<Vec<_>>().join(" | ");
    }
    let types: Vec<&str> = match p.get("type") {
        Some(serde_json::Value::String(s)) => vec![s.as_str()],
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    if types.is_empty() {
        return "any".into();
    }
    types
        .iter()
        .map(|t| match *t {
            "string" => "string",
            "number" | "integer" => "number",
            "boolean" => "boolean",
            "array" => "any[]",
            "object" => "Record<string, any>",
            "null" => "null",
            _ => "any",
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn as_index(v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        v => Err(format!(
            "cannot index slice/array with type {}",
            v.type_name()
        )),
    }
}

fn index(a: &[Value]) -> Result<Value, String> {
    let Some((first, rest)) = a.split_first() else {
        return Err("wrong number of args for index".into());
    };
    let mut v = first.clone();
    for k in rest {
        v = match (&v, k) {
            (Value::List(l), k) => {
                let i = as_index(k)?;
                l.get(usize::try_from(i).map_err(|_| format!("index out of range: {i}"))?)
                    .cloned()
                    .ok_or_else(|| format!("index out of range: {i}"))?
            }
            (Value::Str(s), k) => {
                let i = as_index(k)?;
                let b = s
                    .as_bytes()
                    .get(i as usize)
                    .ok_or_else(|| format!("index out of range: {i}"))?;
                Value::Int(*b as i64)
            }
            (Value::Map(m), Value::Str(k)) => m.entries.get(&**k).cloned().unwrap_or_default(),
            (Value::Map(_), k) => {
                return Err(format!(
                    "value has type {}; should be string",
                    k.type_name()
                ))
            }
            (Value::Nil, _) => return Err("index of untyped nil".into()),
            (v, _) => return Err(format!("can't index item of type {}", v.type_name())),
        };
    }
    Ok(v)
}

fn slice(a: &[Value]) -> Result<Value, String> {
    let Some((item, idx)) = a.split_first() else {
        return Err("wrong number of args for slice".into());
    };
    if idx.len() > 2 {
        return Err("too many slice indexes".into());
    }
    let len = match item {
        Value::Str(s) => s.len(),
        Value::List(l) => l.len(),
        v => return Err(format!("can't slice item of type {}", v.type_name())),
    } as i64;
    let lo = idx.first().map(as_index).transpose()?.unwrap_or(0);
    let hi = idx.get(1).map(as_index).transpose()?.unwrap_or(len);
    if lo < 0 || hi < lo || hi > len {
        return Err(format!("index out of range: {lo}:{hi}"));
    }
    let (lo, hi) = (lo as usize, hi as usize);
    Ok(match item {
        Value::Str(s) => Value::str(s.get(lo..hi).ok_or("slice splits a UTF-8 sequence")?),
        Value::List(l) => Value::list(l[lo..hi].to_vec()),
        _ => unreachable!("checked above"),
    })
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn equal(a: &Value, b: &Value) -> Result<bool, String> {
    Ok(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Nil, Value::Nil) => true,
        (Value::Nil, _) | (_, Value::Nil) => false,
        (x, y) => match (num(x), num(y)) {
            (Some(p), Some(q)) => p == q,
            _ => return Err("incompatible types for comparison".into()),
        },
    })
}

fn order(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (x, y) => match (num(x), num(y)) {
            (Some(p), Some(q)) => p.partial_cmp(&q).ok_or_else(|| "NaN comparison".into()),
            _ => Err("incompatible types for comparison".into()),
        },
    }
}

/// `fmt.Sprint`: a space between operands when neither side is a string. `None` past `max`.
pub fn sprint(a: &[Value], max: usize) -> Option<String> {
    let mut s = String::new();
    for (i, v) in a.iter().enumerate() {
        if i > 0 && !matches!(v, Value::Str(_)) && !matches!(a[i - 1], Value::Str(_)) {
            s.push(' ');
        }
        v.write_v(&mut s);
        if s.len() > max {
            return None;
        }
    }
    Some(s)
}

/// `fmt.Sprintln`: operands always space-separated, then a newline. `None` past `max`.
fn sprintln(a: &[Value], max: usize) -> Option<String> {
    let mut s = String::new();
    for (i, v) in a.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&v.go_string());
        if s.len() > max {
            return None;
        }
    }
    s.push('\n');
    (s.len() <= max).then_some(s)
}

/// Go's `fmt.parsenum`: digits from `chars`; `Err(())` once the number passes Go's bound
/// (Go then treats the rest of the format as consumed).
fn parse_fmt_num(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> Result<Option<usize>, ()> {
    let mut num: Option<i64> = None;
    while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
        let n = num.unwrap_or(0);
        if n > MAX_FMT_NUM {
            return Err(());
        }
        num = Some(n * 10 + i64::from(d));
        chars.next();
    }
    Ok(num.map(|n| n as usize))
}

/// `fmt.Sprintf` for the verbs templates use: `%v %s %d %q %t %f %e %g %x %X %c %%`, flags
/// `-+0 #`, width and precision. Mismatches print Go's `%!verb(type=value)` forms. Gives up
/// (`None`) before the result passes `max` bytes; widths and precisions are bounded as Go bounds
/// them (`MAX_FMT_NUM`), so one verb pads at most ~1e7 characters.
pub fn sprintf_max(f: &str, args: &[Value], max: usize) -> Option<String> {
    let mut out = String::new();
    let mut chars = f.chars().peekable();
    let mut next_arg = 0;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut minus, mut plus, mut zero, mut space) = (false, false, false, false);
        while let Some(&fl) = chars.peek() {
            match fl {
                '-' => minus = true,
                '+' => plus = true,
                '0' => zero = true,
                ' ' => space = true,
                '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = None;
        if chars.peek() == Some(&'*') {
            // `*` takes the width from the next argument; negative means left-justify.
            chars.next();
            match args.get(next_arg) {
                Some(Value::Int(w)) if w.unsigned_abs() <= MAX_FMT_NUM as u64 => {
                    minus |= *w < 0;
                    width = Some(w.unsigned_abs() as usize);
                }
                _ => out.push_str("%!(BADWIDTH)"),
            }
            next_arg += 1;
        } else {
            match parse_fmt_num(&mut chars) {
                Ok(w) => width = w,
                Err(()) => {
                    out.push_str("%!(NOVERB)");
                    break;
                }
            }
        }
        let mut prec = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            if chars.peek() == Some(&'*') {
                chars.next();
                match args.get(next_arg) {
                    Some(Value::Int(v)) if (0..=MAX_FMT_NUM).contains(v) => {
                        prec = Some(*v as usize)
                    }
                    _ => out.push_str("%!(BADPREC)"),
                }
                next_arg += 1;
            } else {
                match parse_fmt_num(&mut chars) {
                    Ok(p) => prec = Some(p.unwrap_or(0)),
                    Err(()) => {
                        out.push_str("%!(NOVERB)");
                        break;
                    }
                }
            }
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next_arg) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        next_arg += 1;
        let body = match format_one(verb, arg, prec, plus, space) {
            Some(b) => b,
            None => format!("%!{verb}({}={})", arg.type_name(), arg.go_string()),
        };
        let n = body.chars().count();
        let w = width.unwrap_or(0);
        if out
            .len()
            .saturating_add(body.len())
            .saturating_add(w.saturating_sub(n))
            > max
        {
            return None;
        }
        if n >= w {
            out.push_str(&body);
        } else if minus {
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', w - n));
        } else if zero && matches!(arg, Value::Int(_) | Value::Float(_)) && verb != 's' {
            let (sign, digits) = match body.strip_prefix(['-', '+']) {
                Some(d) => (&body[..1], d),
                None => ("", body.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', w - n));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', w - n));
            out.push_str(&body);
        }
    }
    if next_arg < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = args[next_arg..]
            .iter()
            .map(|a| format!("{}={}", a.type_name(), a.go_string()))
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    (out.len() <= max).then_some(out)
}

fn format_one(
    verb: char,
    arg: &Value,
    prec: Option<usize>,
    plus: bool,
    space: bool,
) -> Option<String> {
    let signed = |s: String, neg: bool| {
        if !neg && plus {
            format!("+{s}")
        } else if !neg && space {
            format!(" {s}")
        } else {
            s
        }
    };
    Some(match (verb, arg) {
        ('v', Value::Float(f)) if prec.is_some() => format!("{:.*}", prec.unwrap_or(0), f),
        ('v', v) => {
            let s = v.go_string();
            match v {
                Value::Int(i) => signed(s, *i < 0),
                Value::Float(f) => signed(s, *f < 0.0),
                _ => s,
            }
        }
        ('s', Value::Str(s)) => match prec {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_string(),
        },
        ('s', v @ (Value::List(_) | Value::Map(_) | Value::Struct(_))) => v.go_string(),
        ('q', Value::Str(s)) => go_quote(s),
        ('q', Value::Int(i)) => format!("'{}'", char::from_u32(*i as u32).unwrap_or('\u{fffd}')),
        ('t', Value::Bool(b)) => b.to_string(),
        ('d', Value::Int(i)) => signed(i.to_string(), *i < 0),
        ('x', Value::Int(i)) => format!("{i:x}"),
        ('X', Value::Int(i)) => format!("{i:X}"),
        ('x', Value::Str(s)) => s.bytes().map(|b| format!("{b:02x}")).collect(),
        ('c', Value::Int(i)) => char::from_u32(*i as u32).unwrap_or('\u{fffd}').to_string(),
        ('f' | 'F', Value::Float(f)) => signed(format!("{:.*}", prec.unwrap_or(6), f), *f < 0.0),
        ('e', Value::Float(f)) => {
            let s = format!("{:.*e}", prec.unwrap_or(6), f);
            let (m, e) = s.split_once('e')?;
            let e: i32 = e.parse().ok()?;
            signed(
                format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs()),
                *f < 0.0,
            )
        }
        ('g', Value::Float(f)) => signed(super::value::format_float_g(*f), *f < 0.0),
        _ => return None,
    })
}

/// Go's `strconv.Quote`: double-quoted, with `\a \b \f \n \r \t \v \\ \"` escapes and `\x`/`\u`
/// for other non-printable characters.
pub fn go_quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\x07' => o.push_str("\\a"),
            '\x08' => o.push_str("\\b"),
            '\x0c' => o.push_str("\\f"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '\x0b' => o.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
