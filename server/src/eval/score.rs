//! Scorers: how a prediction (the response content, trimmed) is judged against an item's gold.
//! `exact`, `contains`, `regex` (gold is the pattern) and `json-field:PATH` (the content parsed as
//! JSON, the dotted PATH's value equal to gold). Pure, table-tested.

use anyhow::bail;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scorer {
    Exact,
    Contains,
    Regex,
    JsonField(String),
}

impl std::str::FromStr for Scorer {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Scorer> {
        Ok(match s {
            "exact" => Scorer::Exact,
            "contains" => Scorer::Contains,
            "regex" => Scorer::Regex,
            _ => match s.strip_prefix("json-field:") {
                Some(path) if !path.is_empty() => Scorer::JsonField(path.to_string()),
                _ => bail!("unknown scorer {s:?} (exact, contains, regex, json-field:PATH)"),
            },
        })
    }
}

/// Gold as text: a JSON string's contents, anything else its JSON text.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

impl Scorer {
    /// What this scorer compares: the trimmed content, or the JSON field's text (None when the
    /// content is not JSON or lacks the field). `predictions identical` compares these.
    pub fn prediction(&self, content: &str) -> Option<String> {
        let content = content.trim();
        match self {
            Scorer::JsonField(path) => {
                let mut v: Value = serde_json::from_str(content).ok()?;
                for part in path.split('.') {
                    v = match v {
                        Value::Object(mut m) => m.remove(part)?,
                        Value::Array(mut a) => {
                            let i: usize = part.parse().ok()?;
                            (i < a.len()).then(|| a.swap_remove(i))?
                        }
                        _ => return None,
                    };
                }
                Some(text(&v))
            }
            _ => Some(content.to_string()),
        }
    }

    /// Whether `content` is correct for `gold`; an invalid regex is an error.
    pub fn correct(&self, content: &str, gold: &Value) -> anyhow::Result<bool> {
        let gold = text(gold);
        let Some(pred) = self.prediction(content) else {
            return Ok(false);
        };
        Ok(match self {
            Scorer::Exact | Scorer::JsonField(_) => pred == gold.trim(),
            Scorer::Contains => pred.contains(gold.as_str()),
            Scorer::Regex => regex::Regex::new(&gold)
                .map_err(|e| anyhow::anyhow!("gold is not a valid regex: {e}"))?
                .is_match(&pred),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scorers() {
        let cases: &[(&str, &str, Value, bool)] = &[
            ("exact", " Paris\n", json!("Paris"), true),
            ("exact", "Paris.", json!("Paris"), false),
            ("exact", "4", json!(4), true),
            ("contains", "It is Paris.", json!("Paris"), true),
            ("contains", "It is Lyon.", json!("Paris"), false),
            ("regex", "answer: 42", json!(r"\b42\b"), true),
            ("regex", "answer: 420", json!(r"\b42\b"), false),
            ("json-field:a.b", r#"{"a":{"b":"x"}}"#, json!("x"), true),
            ("json-field:a.1", r#"{"a":[1,2]}"#, json!(2), true),
            ("json-field:a.b", r#"{"a":{}}"#, json!("x"), false),
            ("json-field:a", "not json", json!("x"), false),
        ];
        for (scorer, content, gold, want) in cases {
            let s: Scorer = scorer.parse().unwrap();
            assert_eq!(
                s.correct(content, gold).unwrap(),
                *want,
                "{scorer} {content:?}"
            );
        }
        assert!("fuzzy".parse::<Scorer>().is_err());
        assert!("json-field:".parse::<Scorer>().is_err());
        assert!(Scorer::Regex.correct("x", &json!("(")).is_err());
    }
}
