//! The request's `format` as a runner constraint (DESIGN 6): `"json"` → any JSON object (Ollama's
//! llama.cpp JSON grammar roots at an object), a JSON-schema object → that schema, `""`/`null`/
//! absent → none, anything else → 400 with Ollama's message. The parser's `thinking_close` rides
//! along, so a thinking response stays free until it closes (single pass); none for raw prompts.

use crate::error::{Error, Result};
use runner_protocol::Constraint;
use serde_json::Value;

/// The constraint for `format`, with the strings that end the response's thinking.
pub fn constraint(
    format: Option<&Value>,
    thinking_close: Vec<String>,
) -> Result<Option<Constraint>> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(Constraint::Json { thinking_close })),
        Some(Value::Object(_)) => Ok(Some(Constraint::JsonSchema {
            schema: format.cloned().unwrap_or_default(),
            thinking_close,
        })),
        Some(other) => Err(Error::BadRequest(format!(
            "invalid format: {}; expected \"json\" or a valid JSON Schema object",
            go_quote(&other.to_string())
        ))),
    }
}

/// Go's `%q` for the ASCII-printable subset that JSON text uses (quotes and backslashes escaped).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn format_values_table() {
        let close = || vec!["</think>".to_string()];
        assert_eq!(constraint(None, close()).unwrap(), None);
        assert_eq!(constraint(Some(&Value::Null), close()).unwrap(), None);
        assert_eq!(constraint(Some(&json!("")), close()).unwrap(), None);
        assert_eq!(
            constraint(Some(&json!("json")), close()).unwrap(),
            Some(Constraint::Json {
                thinking_close: close()
            })
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            constraint(Some(&schema), vec![]).unwrap(),
            Some(Constraint::JsonSchema {
                schema: schema.clone(),
                thinking_close: vec![]
            })
        );
        for bad in [json!("yaml"), json!(3), json!(["json"]), json!(true)] {
            let e = constraint(Some(&bad), vec![]).unwrap_err();
            assert!(matches!(e, Error::BadRequest(_)), "{bad}");
            assert!(
                e.to_string()
                    .contains("expected \"json\" or a valid JSON Schema object"),
                "{e}"
            );
        }
        let e = constraint(Some(&json!("yaml")), vec![]).unwrap_err();
        assert!(
            e.to_string().contains(r#"invalid format: "\"yaml\"""#),
            "{e}"
        );
    }
}
