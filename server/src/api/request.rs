//! Validation of the loosely typed request fields shared by generate/chat/embed: `think`,
//! `format`, `keep_alive`, `top_logprobs`, and generate's `raw` restrictions. Each returns
//! Ollama's exact 400 message; all are pure and table-tested.

use serde_json::Value;

use super::show::go_quote;
use super::types::GenerateRequest;
use crate::config::KeepAlive;
use crate::error::{Error, Result};

/// How hard to think: `true` means `Medium`, `false` means off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Think {
    Off,
    On(ThinkLevel),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkLevel {
    Low,
    Medium,
    High,
    Max,
}

/// Which shape the request gave: the OpenAI/harmony layers treat `true` and `"medium"` alike,
/// but templates see `.IsThinkSet` and the raw value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkValue {
    pub think: Think,
    /// The request used a level string rather than a bool.
    pub is_level: bool,
}

impl ThinkValue {
    pub fn enabled(&self) -> bool {
        matches!(self.think, Think::On(_))
    }

    /// The level string templates and runners see: `""` when off, `medium` for `true`.
    pub fn level(&self) -> &'static str {
        match self.think {
            Think::Off => "",
            Think::On(ThinkLevel::Low) => "low",
            Think::On(ThinkLevel::Medium) => "medium",
            Think::On(ThinkLevel::High) => "high",
            Think::On(ThinkLevel::Max) => "max",
        }
    }
}

/// `think`: absent or `null` → `None` (not the same as `false`: thinking models default on).
pub fn parse_think(v: Option<&Value>) -> Result<Option<ThinkValue>> {
    let bad = |msg: String| Err(Error::BadRequest(msg));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(ThinkValue {
            think: if *b { Think::On(ThinkLevel::Medium) } else { Think::Off },
            is_level: false,
        })),
        Some(Value::String(s)) => {
            let level = match s.as_str() {
                "low" => ThinkLevel::Low,
                "medium" => ThinkLevel::Medium,
                "high" => ThinkLevel::High,
                "max" => ThinkLevel::Max,
                _ => {
                    return bad(format!(
                        "invalid think value: {} (must be \"high\", \"medium\", \"low\", \"max\", true, or false)",
                        go_quote(s)
                    ))
                }
            };
            Ok(Some(ThinkValue {
                think: Think::On(level),
                is_level: true,
            }))
        }
        Some(_) => bad(
            "think must be a boolean or string (\"high\", \"medium\", \"low\", \"max\", true, or false)"
                .into(),
        ),
    }
}

/// Structured-output constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    None,
    /// Any JSON value (`"json"`).
    Json,
    /// A JSON Schema object.
    Schema(Value),
}

/// `format`: `"json"`, a schema object, or `""`/`null`/absent for none; anything else is 400.
pub fn parse_format(v: Option<&Value>) -> Result<Format> {
    match v {
        None | Some(Value::Null) => Ok(Format::None),
        Some(Value::String(s)) if s.is_empty() => Ok(Format::None),
        Some(Value::String(s)) if s == "json" => Ok(Format::Json),
        Some(obj @ Value::Object(_)) => Ok(Format::Schema(obj.clone())),
        Some(other) => Err(Error::BadRequest(format!(
            "invalid format: {}; expected \"json\" or a valid JSON Schema object",
            go_quote(&other.to_string())
        ))),
    }
}

/// `keep_alive`: a JSON number is seconds (negative = forever); a string must be a Go duration
/// (`"5m"`, `"0"`; `"300"` is an error); absent or `null` → `None` (use `OLLAMA_KEEP_ALIVE`).
pub fn parse_keep_alive(v: Option<&Value>) -> Result<Option<KeepAlive>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => KeepAlive::from_json(v).map(Some).map_err(Error::BadRequest),
    }
}

/// 400 `top_logprobs must be between 0 and 20`.
pub fn check_top_logprobs(n: i64) -> Result<()> {
    if (0..=20).contains(&n) {
        Ok(())
    } else {
        Err(Error::BadRequest(
            "top_logprobs must be between 0 and 20".into(),
        ))
    }
}

/// Generate with `raw` renders no template, so it cannot take one, a system prompt or context.
pub fn check_raw(req: &GenerateRequest) -> Result<()> {
    let has_context = req.context.as_ref().is_some_and(|c| !c.is_empty());
    if req.raw && (!req.template.is_empty() || !req.system.is_empty() || has_context) {
        return Err(Error::BadRequest(
            "raw mode does not support template, system, or context".into(),
        ));
    }
    Ok(())
}

/// Thinking against the model's capabilities: unset on a thinking model means on; an explicit
/// request to think on any other model is 400 `"NAME" does not support thinking`.
pub fn effective_think(
    requested: Option<ThinkValue>,
    model_can_think: bool,
    model_name: &str,
) -> Result<Option<ThinkValue>> {
    match requested {
        None if model_can_think => Ok(Some(ThinkValue {
            think: Think::On(ThinkLevel::Medium),
            is_level: false,
        })),
        Some(t) if t.enabled() && !model_can_think => Err(Error::BadRequest(format!(
            "{} does not support thinking",
            go_quote(model_name)
        ))),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn think_values() {
        let on = |l| {
            Some(ThinkValue {
                think: Think::On(l),
                is_level: true,
            })
        };
        assert_eq!(parse_think(None).unwrap(), None);
        assert_eq!(parse_think(Some(&json!(null))).unwrap(), None);
        let t = parse_think(Some(&json!(true))).unwrap().unwrap();
        assert_eq!(
            (t.enabled(), t.level(), t.is_level),
            (true, "medium", false)
        );
        let f = parse_think(Some(&json!(false))).unwrap().unwrap();
        assert_eq!((f.enabled(), f.level()), (false, ""));
        assert_eq!(
            parse_think(Some(&json!("low"))).unwrap(),
            on(ThinkLevel::Low)
        );
        assert_eq!(
            parse_think(Some(&json!("high"))).unwrap(),
            on(ThinkLevel::High)
        );
        assert_eq!(
            parse_think(Some(&json!("max"))).unwrap(),
            on(ThinkLevel::Max)
        );
        assert_eq!(
            parse_think(Some(&json!("extreme"))).unwrap_err().to_string(),
            "invalid think value: \"extreme\" (must be \"high\", \"medium\", \"low\", \"max\", true, or false)"
        );
        let err = parse_think(Some(&json!(1))).unwrap_err();
        assert_eq!(err.status(), 400);
        assert_eq!(
            err.to_string(),
            "think must be a boolean or string (\"high\", \"medium\", \"low\", \"max\", true, or false)"
        );
    }

    #[test]
    fn think_against_capabilities() {
        let yes = parse_think(Some(&json!(true))).unwrap();
        let no = parse_think(Some(&json!(false))).unwrap();
        assert_eq!(effective_think(None, true, "q").unwrap(), yes);
        assert_eq!(effective_think(None, false, "q").unwrap(), None);
        assert_eq!(effective_think(no, false, "q").unwrap(), no);
        assert_eq!(
            effective_think(yes, false, "llama3")
                .unwrap_err()
                .to_string(),
            "\"llama3\" does not support thinking"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(parse_format(None).unwrap(), Format::None);
        assert_eq!(parse_format(Some(&json!(null))).unwrap(), Format::None);
        assert_eq!(parse_format(Some(&json!(""))).unwrap(), Format::None);
        assert_eq!(parse_format(Some(&json!("json"))).unwrap(), Format::Json);
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            parse_format(Some(&schema)).unwrap(),
            Format::Schema(schema.clone())
        );
        for (bad, shown) in [
            (json!("yaml"), r#""\"yaml\"""#),
            (json!(42), r#""42""#),
            (json!(["json"]), r#""[\"json\"]""#),
        ] {
            let err = parse_format(Some(&bad)).unwrap_err();
            assert_eq!(err.status(), 400);
            assert_eq!(
                err.to_string(),
                format!("invalid format: {shown}; expected \"json\" or a valid JSON Schema object")
            );
        }
    }

    #[test]
    fn keep_alive_values() {
        let d = |s| Some(KeepAlive::For(Duration::from_secs(s)));
        assert_eq!(parse_keep_alive(None).unwrap(), None);
        assert_eq!(parse_keep_alive(Some(&json!(null))).unwrap(), None);
        assert_eq!(parse_keep_alive(Some(&json!(300))).unwrap(), d(300));
        assert_eq!(
            parse_keep_alive(Some(&json!(1.5))).unwrap(),
            Some(KeepAlive::For(Duration::from_millis(1500)))
        );
        assert_eq!(parse_keep_alive(Some(&json!(0))).unwrap(), d(0));
        assert_eq!(
            parse_keep_alive(Some(&json!(-1))).unwrap(),
            Some(KeepAlive::Forever)
        );
        assert_eq!(parse_keep_alive(Some(&json!("5m"))).unwrap(), d(300));
        assert_eq!(parse_keep_alive(Some(&json!("0"))).unwrap(), d(0));
        assert_eq!(
            parse_keep_alive(Some(&json!("-1m"))).unwrap(),
            Some(KeepAlive::Forever)
        );
        let cases = [
            (json!("300"), "time: missing unit in duration \"300\""),
            (json!("-1"), "time: missing unit in duration \"-1\""),
            (json!("soon"), "time: invalid duration \"soon\""),
            (json!(true), "Unsupported type: 'bool'"),
            (json!({}), "Unsupported type: 'map[string]interface {}'"),
        ];
        for (v, want) in cases {
            let err = parse_keep_alive(Some(&v)).unwrap_err();
            assert_eq!(
                (err.status().as_u16(), err.to_string()),
                (400, want.to_string()),
                "{v}"
            );
        }
    }

    #[test]
    fn top_logprobs_and_raw() {
        assert!(check_top_logprobs(0).is_ok() && check_top_logprobs(20).is_ok());
        for n in [-1, 21] {
            assert_eq!(
                check_top_logprobs(n).unwrap_err().to_string(),
                "top_logprobs must be between 0 and 20"
            );
        }
        let mut req = GenerateRequest {
            raw: true,
            ..Default::default()
        };
        assert!(check_raw(&req).is_ok());
        req.context = Some(vec![]);
        assert!(check_raw(&req).is_ok());
        req.system = "s".into();
        assert_eq!(
            check_raw(&req).unwrap_err().to_string(),
            "raw mode does not support template, system, or context"
        );
    }
}
