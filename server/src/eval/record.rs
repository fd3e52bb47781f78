//! One line of a run file (RUN.jsonl): what was asked, what came back, and where it came from.
//! `run` writes them, `compare` reads them; the key of a row is (`id`, `repeat`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: Value,
    #[serde(default)]
    pub repeat: u32,
    pub request_hash: String,
    pub prompt_hash: String,
    #[serde(default)]
    pub gold: Option<Value>,
    #[serde(default)]
    pub scorer: Option<String>,
    pub model: String,
    /// Set when the request failed; the response fields are then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub response: Response,
    #[serde(default)]
    pub done_reason: Option<String>,
    #[serde(default)]
    pub prompt_eval_count: u64,
    #[serde(default)]
    pub eval_count: u64,
    #[serde(default)]
    pub total_duration: u64,
    #[serde(default)]
    pub load_duration: u64,
    #[serde(default)]
    pub prompt_eval_duration: u64,
    #[serde(default)]
    pub eval_duration: u64,
    pub provenance: RowProvenance,
}

/// The answer itself: what `responses byte-identical` compares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub content: String,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Value>,
}

/// Where a row came from: the server asked, its build and config, the model's manifest digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowProvenance {
    pub host: String,
    /// `/api/version`'s whole body (version, git_commit, engines, config_digest).
    pub server: Value,
    pub model_digest: Option<String>,
}

impl Response {
    /// The answer in an `/api/generate` (`response`, `thinking`) or `/api/chat` (`message`) body.
    pub fn of(body: &Value) -> Response {
        let msg = &body["message"];
        let (content, thinking) = if msg.is_object() {
            (&msg["content"], &msg["thinking"])
        } else {
            (&body["response"], &body["thinking"])
        };
        Response {
            content: content.as_str().unwrap_or_default().to_string(),
            thinking: thinking.as_str().map(str::to_string),
            tool_calls: msg.get("tool_calls").cloned(),
        }
    }
}

impl RowProvenance {
    /// One line naming this source, for the MIXED banner.
    pub fn label(&self) -> String {
        format!(
            "host {} version {} commit {} engines {} config {} model {}",
            self.host,
            self.server["herd_version"]
                .as_str()
                .or(self.server["version"].as_str())
                .unwrap_or("?"),
            self.server["git_commit"].as_str().unwrap_or("?"),
            self.server["engines"],
            self.server["config_digest"].as_str().unwrap_or("?"),
            self.model_digest.as_deref().unwrap_or("?"),
        )
    }
}

impl Record {
    pub fn key(&self) -> (String, u32) {
        (self.id.to_string(), self.repeat)
    }

    /// Fills the response fields from an `/api/generate` or `/api/chat` body.
    pub fn fill(&mut self, body: &Value) {
        self.response = Response::of(body);
        self.done_reason = body["done_reason"].as_str().map(str::to_string);
        let n = |k: &str| body[k].as_u64().unwrap_or(0);
        self.prompt_eval_count = n("prompt_eval_count");
        self.eval_count = n("eval_count");
        self.total_duration = n("total_duration");
        self.load_duration = n("load_duration");
        self.prompt_eval_duration = n("prompt_eval_duration");
        self.eval_duration = n("eval_duration");
    }
}

/// Reads a run file. A torn last line (the run was killed mid-write) is dropped and its byte
/// offset returned so `run` can truncate it; a bad line elsewhere is an error naming it.
pub fn read(text: &str) -> anyhow::Result<(Vec<Record>, usize)> {
    let mut rows = Vec::new();
    let mut good_end = 0;
    let mut offset = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        offset += line.len();
        if line.trim().is_empty() {
            good_end = offset;
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) if line.ends_with('\n') => {
                rows.push(r);
                good_end = offset;
            }
            // Only the last line can lack its newline or be torn.
            _ if i + 1 == lines.len() => break,
            Ok(_) => break,
            Err(e) => anyhow::bail!("run file line {}: {e}", i + 1),
        }
    }
    Ok((rows, good_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_last_line_is_dropped_and_bad_middle_lines_refused() {
        let line = r#"{"id":1,"request_hash":"h","prompt_hash":"p","model":"m","provenance":{"host":"x","server":{},"model_digest":null}}"#;
        let text = format!("{line}\n{}", &line[..20]);
        let (rows, end) = read(&text).unwrap();
        assert_eq!((rows.len(), end), (1, line.len() + 1));
        // A complete last line without its newline is also torn (its write may not be finished).
        let (rows, end) = read(line).unwrap();
        assert_eq!((rows.len(), end), (0, 0));
        let e = read(&format!("{}\n{line}\n", &line[..20])).unwrap_err();
        assert!(e.to_string().starts_with("run file line 1:"), "{e}");
    }
}
