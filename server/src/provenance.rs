//! What a response can be traced back to: herd's version, the git commit it was built from, the
//! engine pins (llama.cpp build/commit from `native/llama.cpp.lock`; MLX once runner-mlx links),
//! and a digest of the server's effective configuration. `/api/version` reports them as extra
//! fields (Ollama's clients read only `version`); `herd eval run` stamps them on every record.
//!
//! The config digest is set once by `herd serve` after parsing; an app built without it (tests
//! driving `server::app` directly) reports no `config_digest` rather than a made-up one.

use std::sync::OnceLock;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// The commit `server/build.rs` found, or "unknown" (not built from a git checkout).
pub const GIT_COMMIT: &str = env!("HERD_GIT_COMMIT");
/// The llama.cpp build number (e.g. `b11434`) runner-llamacpp is pinned to.
pub const LLAMACPP_BUILD: &str = env!("HERD_LLAMACPP_BUILD");
/// The llama.cpp commit of that pin ("unknown" when the source archive carries none).
pub const LLAMACPP_COMMIT: &str = env!("HERD_LLAMACPP_COMMIT");
/// The MLX version runner-mlx links (`native/mlx.lock`; the PyPI wheels carry no commit).
pub const MLX_VERSION: &str = env!("HERD_MLX_VERSION");

static CONFIG_DIGEST: OnceLock<String> = OnceLock::new();

/// One engine's pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnginePin {
    pub build: String,
    pub commit: String,
}

/// The engines this build can run, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Engines {
    #[serde(rename = "llama.cpp")]
    pub llamacpp: EnginePin,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlx: Option<EnginePin>,
}

/// The fields `/api/version` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Exactly Ollama's field: what `ollama -v` and clients read. It names the Ollama release
    /// whose API herd implements (`OLLAMA_COMPAT_VERSION`), since clients gate features on it
    /// (VS Code's Ollama provider refuses servers older than 0.6.4); herd's own version is
    /// `herd_version`.
    pub version: &'static str,
    pub herd_version: &'static str,
    pub git_commit: &'static str,
    pub engines: Engines,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
}

/// This process's provenance.
pub fn current() -> Provenance {
    Provenance {
        version: crate::OLLAMA_COMPAT_VERSION,
        herd_version: crate::VERSION,
        git_commit: GIT_COMMIT,
        engines: Engines {
            llamacpp: EnginePin {
                build: LLAMACPP_BUILD.into(),
                commit: LLAMACPP_COMMIT.into(),
            },
            mlx: Some(EnginePin {
                build: MLX_VERSION.into(),
                commit: "unknown".into(),
            }),
        },
        config_digest: CONFIG_DIGEST.get().cloned(),
    }
}

impl Provenance {
    /// One line naming this build and its engine pins, as `herd --version` prints it:
    /// `herd 0.1.0 (git abc123) llama.cpp b11434 (commit def456)[ mlx 0.32.4 (commit …)]`.
    pub fn pins_line(&self) -> String {
        let pin = |name: &str, p: &EnginePin| format!(" {name} {} (commit {})", p.build, p.commit);
        let mut line = format!("herd {} (git {})", self.herd_version, self.git_commit);
        line.push_str(&pin("llama.cpp", &self.engines.llamacpp));
        if let Some(mlx) = &self.engines.mlx {
            line.push_str(&pin("mlx", mlx));
        }
        line
    }
}

/// Records the digest of the effective configuration (`Config::effective()`, already redacted).
/// The first call wins: the configuration is parsed once per process.
pub fn set_config(pairs: &[(&'static str, String)]) {
    let _ = CONFIG_DIGEST.set(config_digest(pairs));
}

/// `sha256:<hex>` of the configuration as a JSON object with keys in sorted order, so the digest
/// depends on the values only, not on the order `effective()` lists them in.
pub fn config_digest(pairs: &[(&str, String)]) -> String {
    let sorted: std::collections::BTreeMap<&str, &str> =
        pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let canonical = serde_json::to_vec(&sorted).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&canonical)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_ignores_order_and_sees_values() {
        let a = [("A", "1".to_string()), ("B", "2".to_string())];
        let b = [("B", "2".to_string()), ("A", "1".to_string())];
        let c = [("A", "1".to_string()), ("B", "3".to_string())];
        assert_eq!(config_digest(&a), config_digest(&b));
        assert_ne!(config_digest(&a), config_digest(&c));
        let d = config_digest(&a);
        assert!(d.starts_with("sha256:") && d.len() == 7 + 64, "{d}");
    }

    #[test]
    fn pins_line_names_every_pin() {
        let mut p = current();
        let line = p.pins_line();
        assert_eq!(
            line,
            format!(
                "herd {} (git {GIT_COMMIT}) llama.cpp {LLAMACPP_BUILD} (commit {LLAMACPP_COMMIT}) \
                 mlx {MLX_VERSION} (commit unknown)",
                crate::VERSION
            )
        );
        let mlx_lock = include_str!("../../native/mlx.lock");
        assert!(
            mlx_lock.contains(&format!("version = \"{MLX_VERSION}\"")),
            "the MLX pin is the lock's"
        );
        p.engines.mlx = None;
        assert!(!p.pins_line().contains("mlx"));
        p.engines.mlx = Some(EnginePin {
            build: "0.32.4".into(),
            commit: "abc".into(),
        });
        assert!(
            p.pins_line().ends_with(" mlx 0.32.4 (commit abc)"),
            "{}",
            p.pins_line()
        );
    }

    #[test]
    fn pins_come_from_the_lock_file() {
        let lock = include_str!("../../native/llama.cpp.lock");
        let build = lock
            .lines()
            .find_map(|l| l.strip_prefix("build = "))
            .unwrap()
            .trim_matches('"');
        assert_eq!(LLAMACPP_BUILD, build);
        assert!(!GIT_COMMIT.is_empty());
    }
}
