//! Progress of a pull or push, shaped exactly like Ollama's `api.ProgressResponse` NDJSON lines
//! (`status`, then `digest`, `total`, `completed`, each omitted when empty/zero).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Progress {
    /// A plain status line (`pulling manifest`, `success`, ...).
    pub fn status(s: impl Into<String>) -> Progress {
        Progress {
            status: s.into(),
            ..Progress::default()
        }
    }

    /// A per-blob line: `<verb> <first 12 hex>` with the full digest and byte counts.
    pub fn blob(verb: &str, digest: &super::Digest, total: u64, completed: u64) -> Progress {
        Progress {
            status: format!("{verb} {}", &digest.hex()[..12]),
            digest: digest.to_string(),
            total,
            completed,
        }
    }
}

/// Where progress goes. Called from async tasks; must not block.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// A sink that drops everything.
pub fn discard() -> ProgressFn {
    Arc::new(|_| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_like_ollama() {
        assert_eq!(
            serde_json::to_string(&Progress::status("pulling manifest")).unwrap(),
            r#"{"status":"pulling manifest"}"#
        );
        let d = super::super::Digest::of_bytes(b"");
        let p = Progress::blob("pulling", &d, 10, 0);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            format!(r#"{{"status":"pulling e3b0c44298fc","digest":"{d}","total":10}}"#)
        );
    }
}
