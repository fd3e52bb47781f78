//! `keep_alive`: how long a model stays loaded after its last request (Ollama's semantics).
//!
//! - JSON number = seconds (fractions allowed); negative = forever.
//! - JSON string = a Go duration (`"5m"`, `"1h30m"`, `"300ms"`, `"-1s"`, `"0"`); negative =
//!   forever. A bare number in a string (`"300"`, `"-1"`) is an error, as in Ollama, with Go's
//!   error text.
//! - Zero = unload as soon as the request ends.
//! - `OLLAMA_KEEP_ALIVE` additionally accepts integer seconds, and falls back to 5m when invalid.
//!   `OLLAMA_LOAD_TIMEOUT` is parsed the same way, with zero or negative meaning no limit.

use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    Forever,
    /// `Duration::ZERO` = unload right after the request.
    For(Duration),
}

impl Default for KeepAlive {
    fn default() -> Self {
        KeepAlive::DEFAULT
    }
}

impl KeepAlive {
    /// Ollama's default: 5 minutes.
    pub const DEFAULT: KeepAlive = KeepAlive::For(Duration::from_secs(300));

    /// From a request's JSON value; the error is the message a client sees.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        match v {
            serde_json::Value::Number(n) => {
                let secs = n.as_f64().unwrap_or(0.0);
                // Go converts to a time.Duration (int64 nanoseconds): a value past ~292 years
                // does not fit and comes out negative on amd64, which Ollama keeps forever.
                Ok(if secs < 0.0 || secs * 1e9 >= i64::MAX as f64 {
                    KeepAlive::Forever
                } else {
                    KeepAlive::For(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
                })
            }
            serde_json::Value::String(s) => Self::parse_go(s),
            other => Err(format!("Unsupported type: '{}'", json_type(other))),
        }
    }

    /// A Go duration string; negative = forever.
    pub fn parse_go(s: &str) -> Result<Self, String> {
        let (negative, d) = parse_go_duration(s)?;
        Ok(if negative && !d.is_zero() {
            KeepAlive::Forever
        } else {
            KeepAlive::For(d)
        })
    }

    /// `OLLAMA_KEEP_ALIVE`: a Go duration or integer seconds; anything else = the default.
    pub fn from_env_value(s: &str) -> Self {
        let s = s.trim();
        if s.is_empty() {
            return Self::DEFAULT;
        }
        if let Ok(k) = Self::parse_go(s) {
            return k;
        }
        match s.parse::<i64>() {
            Ok(n) if n < 0 => KeepAlive::Forever,
            Ok(n) => KeepAlive::For(Duration::from_secs(n as u64)),
            Err(_) => Self::DEFAULT,
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == KeepAlive::For(Duration::ZERO)
    }

    /// `None` = forever.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(*d),
        }
    }
}

/// `OLLAMA_LOAD_TIMEOUT`: a Go duration or integer seconds; invalid = 5m; zero or negative =
/// no limit (`None`).
pub fn load_timeout_from_env_value(s: &str) -> Option<Duration> {
    let s = s.trim();
    let default = Some(Duration::from_secs(300));
    if s.is_empty() {
        return default;
    }
    match parse_go_duration(s) {
        Ok((negative, d)) => (!negative && !d.is_zero()).then_some(d),
        Err(_) => match s.parse::<i64>() {
            Ok(n) if n > 0 => Some(Duration::from_secs(n as u64)),
            Ok(_) => None,
            Err(_) => default,
        },
    }
}

impl<'de> Deserialize<'de> for KeepAlive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        KeepAlive::from_json(&v).map_err(serde::de::Error::custom)
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "<nil>",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Array(_) => "[]interface {}",
        serde_json::Value::Object(_) => "map[string]interface {}",
        serde_json::Value::Number(_) => "float64",
        serde_json::Value::String(_) => "string",
    }
}

/// Go's `time.ParseDuration` grammar: `[-+]?(\d*(\.\d*)?unit)+` or `0`, units ns us µs μs ms s
/// m h. Returns (negative, magnitude); overflow saturates.
fn parse_go_duration(orig: &str) -> Result<(bool, Duration), String> {
    let invalid = || format!("time: invalid duration {orig:?}");
    let mut s = orig;
    let negative = s.starts_with('-');
    if let Some(rest) = s.strip_prefix(['-', '+']) {
        s = rest;
    }
    if s == "0" {
        return Ok((negative, Duration::ZERO));
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int, rest) = s.split_at(int_len);
        let (frac, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", rest),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {orig:?}"));
        }
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {orig:?}")),
        };
        let whole: u128 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| invalid())?
        };
        let mut nanos = whole.saturating_mul(nanos_per);
        if !frac.is_empty() {
            let digits = &frac[..frac.len().min(18)];
            let f: u128 = digits.parse().map_err(|_| invalid())?;
            nanos = nanos.saturating_add(f * nanos_per / 10u128.pow(digits.len() as u32));
        }
        let part = Duration::from_nanos(nanos.min(u64::MAX as u128) as u64);
        total = total.saturating_add(part);
        s = rest;
    }
    Ok((negative, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(s: f64) -> KeepAlive {
        KeepAlive::For(Duration::from_secs_f64(s))
    }

    #[test]
    fn json_values() {
        let cases: &[(serde_json::Value, Result<KeepAlive, &str>)] = &[
            (json!(300), Ok(secs(300.0))),
            (json!(1.5), Ok(secs(1.5))),
            (json!(0), Ok(secs(0.0))),
            (json!(-1), Ok(KeepAlive::Forever)),
            (json!(-0.5), Ok(KeepAlive::Forever)),
            (json!("5m"), Ok(secs(300.0))),
            (json!("1h30m"), Ok(secs(5400.0))),
            (json!("300ms"), Ok(secs(0.3))),
            (json!("1.5h"), Ok(secs(5400.0))),
            (json!(".5s"), Ok(secs(0.5))),
            (json!("2h45m10.5s"), Ok(secs(9910.5))),
            (json!("10us"), Ok(KeepAlive::For(Duration::from_micros(10)))),
            (
                json!("10\u{b5}s"),
                Ok(KeepAlive::For(Duration::from_micros(10))),
            ),
            (json!("+5s"), Ok(secs(5.0))),
            (json!("0"), Ok(secs(0.0))),
            (json!("-0"), Ok(secs(0.0))),
            (json!("-1s"), Ok(KeepAlive::Forever)),
            (json!("-1m"), Ok(KeepAlive::Forever)),
            (json!("300"), Err(r#"time: missing unit in duration "300""#)),
            (json!("-1"), Err(r#"time: missing unit in duration "-1""#)),
            (
                json!("5x"),
                Err(r#"time: unknown unit "x" in duration "5x""#),
            ),
            (json!(""), Err(r#"time: invalid duration """#)),
            (json!("."), Err(r#"time: invalid duration ".""#)),
            (json!("s"), Err(r#"time: invalid duration "s""#)),
            (json!(true), Err("Unsupported type: 'bool'")),
        ];
        for (v, want) in cases {
            let got = KeepAlive::from_json(v);
            assert_eq!(got, want.map_err(String::from), "{v}");
        }
    }

    #[test]
    fn deserializes_inside_a_request() {
        #[derive(Deserialize)]
        struct Req {
            keep_alive: Option<KeepAlive>,
        }
        let r: Req = serde_json::from_str(r#"{"keep_alive":"10m"}"#).unwrap();
        assert_eq!(r.keep_alive, Some(secs(600.0)));
        let r: Req = serde_json::from_str(r#"{"keep_alive":null}"#).unwrap();
        assert_eq!(r.keep_alive, None);
        let e = serde_json::from_str::<Req>(r#"{"keep_alive":"300"}"#)
            .err()
            .unwrap();
        assert!(e.to_string().contains("missing unit"), "{e}");
    }

    #[test]
    fn env_values() {
        assert_eq!(KeepAlive::from_env_value(""), KeepAlive::DEFAULT);
        assert_eq!(KeepAlive::from_env_value("1h"), secs(3600.0));
        assert_eq!(KeepAlive::from_env_value("600"), secs(600.0));
        assert_eq!(KeepAlive::from_env_value("-1"), KeepAlive::Forever);
        assert_eq!(KeepAlive::from_env_value("0"), secs(0.0));
        assert_eq!(KeepAlive::from_env_value("soon"), KeepAlive::DEFAULT);
        assert!(KeepAlive::from_env_value("0").is_zero());
        assert_eq!(KeepAlive::Forever.duration(), None);
    }

    #[test]
    fn load_timeout_env_values() {
        let m5 = Some(Duration::from_secs(300));
        let cases = [
            ("", m5),
            ("10m", Some(Duration::from_secs(600))),
            ("90", Some(Duration::from_secs(90))),
            ("0", None),
            ("-1", None),
            ("-5s", None),
            ("later", m5),
        ];
        for (v, want) in cases {
            assert_eq!(load_timeout_from_env_value(v), want, "{v:?}");
        }
    }
}
