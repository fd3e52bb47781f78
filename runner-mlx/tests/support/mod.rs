//! What runner-mlx's integration tests share: the SmolLM2 MLX test checkpoint.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SmolLM2-135M MLX checkpoint (scripts/make-mlx-test-model makes it once from the GGUF
/// scripts/fetch-test-models fetches, and caches it).
pub fn model_dir() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("bash")
            .arg(root.join("scripts/make-mlx-test-model"))
            .env("RUNNER_MLX", env!("CARGO_BIN_EXE_runner-mlx"))
            .output()
            .expect("run scripts/make-mlx-test-model");
        assert!(
            out.status.success(),
            "make-mlx-test-model failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}
