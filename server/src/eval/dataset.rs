//! The dataset `herd eval run` reads (JSONL, one item a line) and the request each item becomes:
//! `/api/chat` for `messages`, `/api/generate` for `prompt`, never streamed. Also the two hashes a
//! record carries: `request_hash` (the whole body sent) and `prompt_hash` (only the question:
//! messages or prompt, and images), which `compare` pairs on.

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};

/// One dataset line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub id: Value,
    #[serde(default)]
    pub messages: Option<Vec<Value>>,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<String>>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub options: Option<Map<String, Value>>,
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default)]
    pub gold: Option<Value>,
    #[serde(default)]
    pub scorer: Option<String>,
}

/// Parses a JSONL dataset; a bad line is an error naming its line number. Ids must be unique.
pub fn parse(text: &str) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item: Item =
            serde_json::from_str(line).with_context(|| format!("dataset line {}", i + 1))?;
        match (&item.messages, &item.prompt) {
            (Some(_), Some(_)) => bail!("dataset line {}: both messages and prompt", i + 1),
            (None, None) => bail!("dataset line {}: needs messages or prompt", i + 1),
            _ => {}
        }
        if !seen.insert(item.id.to_string()) {
            bail!("dataset line {}: duplicate id {}", i + 1, item.id);
        }
        items.push(item);
    }
    Ok(items)
}

impl Item {
    /// The endpoint and body for `model`; `keep_alive` is added when set (cold runs).
    pub fn request(&self, model: &str) -> anyhow::Result<(&'static str, Value)> {
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert("stream".into(), json!(false));
        let path = if let Some(messages) = &self.messages {
            let mut messages = messages.clone();
            if let Some(images) = &self.images {
                // Item-level images belong to the last user turn, where Ollama reads them.
                let last = messages
                    .iter_mut()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .ok_or_else(|| anyhow!("item {}: images but no user message", self.id))?;
                last["images"] = json!(images);
            }
            body.insert("messages".into(), Value::Array(messages));
            "/api/chat"
        } else {
            body.insert("prompt".into(), json!(self.prompt));
            if let Some(images) = &self.images {
                body.insert("images".into(), json!(images));
            }
            "/api/generate"
        };
        for (k, v) in [
            ("format", self.format.clone()),
            ("options", self.options.clone().map(Value::Object)),
            ("think", self.think.clone()),
        ] {
            if let Some(v) = v {
                body.insert(k.into(), v);
            }
        }
        Ok((path, Value::Object(body)))
    }

    /// Hash of the question alone (messages or prompt, and images): equal across models/options.
    pub fn prompt_hash(&self) -> String {
        hash(&json!({"messages": self.messages, "prompt": self.prompt, "images": self.images}))
    }
}

/// `sha256:<hex>` of a JSON value's compact text (serde_json keeps insertion order, which the
/// request builder fixes, so equal requests hash equally).
pub fn hash(v: &Value) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_items_and_builds_requests() {
        let text = r#"{"id":1,"prompt":"hi","options":{"seed":1},"gold":"x"}

{"id":"b","messages":[{"role":"user","content":"q"}],"images":["aGk="],"think":false}"#;
        let items = parse(text).unwrap();
        let (path, body) = items[0].request("m").unwrap();
        assert_eq!(path, "/api/generate");
        assert_eq!(
            body,
            json!({"model":"m","stream":false,"prompt":"hi","options":{"seed":1}})
        );
        let (path, body) = items[1].request("m").unwrap();
        assert_eq!(path, "/api/chat");
        assert_eq!(body["messages"][0]["images"], json!(["aGk="]));
        assert_eq!(body["think"], json!(false));
        assert_ne!(items[0].prompt_hash(), items[1].prompt_hash());
    }

    #[test]
    fn bad_lines_are_named() {
        let cases = [
            (r#"{"id":1}"#, "line 1: needs messages or prompt"),
            (
                r#"{"id":1,"prompt":"a","messages":[]}"#,
                "line 1: both messages and prompt",
            ),
            (
                "{\"id\":1,\"prompt\":\"a\"}\n{\"id\":1,\"prompt\":\"b\"}",
                "line 2: duplicate id 1",
            ),
            ("{\"id\":1,\"prompt\":\"a\",\"nope\":1}", "dataset line 1"),
            ("not json", "dataset line 1"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
