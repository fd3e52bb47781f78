//! Value types and parsers of herd's operations settings (`HERD_API_KEYS`,
//! `HERD_API_KEYS_FILE`, `HERD_SHUTDOWN_GRACE`): secrets that never print, and durations with
//! the same grammar as Ollama's (Go duration or integer seconds).

use std::path::Path;
use std::time::Duration;

use super::parse::{clean, env_duration_nanos};

/// API keys from the environment or a file. `Debug` prints only how many there are, so the
/// derived `Debug` of `Config` (and any log of it) never shows a key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(pub Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

/// `HERD_API_KEYS`: comma-separated, entries trimmed, empty entries dropped.
pub fn parse_key_list(raw: &str) -> Result<Secrets, String> {
    Ok(Secrets(
        clean(raw)
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect(),
    ))
}

/// The contents of `HERD_API_KEYS_FILE`: one key per line; blank lines and `#` comments are
/// skipped. A file that names no key is an error (the operator meant to lock the server).
pub fn keys_from_file_text(text: &str) -> Result<Vec<String>, String> {
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if keys.is_empty() {
        return Err("contains no key".into());
    }
    Ok(keys)
}

pub fn read_keys_file(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    keys_from_file_text(&text)
}

/// A non-negative duration: Go duration or integer seconds; negative values are refused.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let ns = env_duration_nanos(raw).ok_or_else(|| {
        format!(
            "{:?} is neither a duration (10s, 1m30s) nor seconds",
            clean(raw)
        )
    })?;
    u64::try_from(ns)
        .map(Duration::from_nanos)
        .map_err(|_| format!("{:?} is negative", clean(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lists() {
        let table = [
            ("", vec![]),
            ("a", vec!["a"]),
            (" a , b,,c ", vec!["a", "b", "c"]),
            ("\"k1,k2\"", vec!["k1", "k2"]),
        ];
        for (raw, want) in table {
            assert_eq!(parse_key_list(raw).unwrap().0, want, "{raw:?}");
        }
        assert_eq!(
            format!("{:?}", parse_key_list("topsecret").unwrap()),
            "Secrets(1 redacted)"
        );
    }

    #[test]
    fn key_files() {
        assert_eq!(
            keys_from_file_text("# ops keys\nk1\n\n  k2  \n#k3\n").unwrap(),
            vec!["k1", "k2"]
        );
        assert!(keys_from_file_text("# none\n\n").is_err());
        assert!(read_keys_file(Path::new("/nonexistent/keys")).is_err());
    }

    #[test]
    fn durations() {
        let table = [
            ("10s", Some(10_000)),
            ("1m30s", Some(90_000)),
            ("5", Some(5_000)),
            ("0", Some(0)),
            ("-1s", None),
            ("soon", None),
        ];
        for (raw, want) in table {
            assert_eq!(
                parse_duration(raw).ok().map(|d| d.as_millis() as u64),
                want,
                "{raw:?}"
            );
        }
    }
}
