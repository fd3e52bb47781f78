//! Which runner binary serves a model: runner-llamacpp for GGUF, runner-mlx for safetensors
//! (MLX) models. The choice is the request's; everything else about a runner (keep_alive,
//! num_parallel, admission, crash recovery, `/api/ps`) is the same for both.

use std::path::{Path, PathBuf};

/// The engine a model runs on, from its format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunnerKind {
    /// GGUF models (and the fake runner's scripts).
    #[default]
    Llamacpp,
    /// Safetensors models: `--model` is the directory the engine prepared.
    Mlx,
}

impl RunnerKind {
    /// From a config blob's `model_format`.
    pub fn for_format(model_format: &str) -> RunnerKind {
        if model_format == "safetensors" {
            RunnerKind::Mlx
        } else {
            RunnerKind::Llamacpp
        }
    }
}

/// The binary for `kind`: the configured runner, or the MLX runner.
pub fn binary(kind: RunnerKind, llamacpp: &Path, mlx: &Path) -> PathBuf {
    match kind {
        RunnerKind::Llamacpp => llamacpp.to_path_buf(),
        RunnerKind::Mlx => mlx.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_picks_the_runner() {
        let (l, m) = (
            PathBuf::from("/r/runner-llamacpp"),
            PathBuf::from("/r/runner-mlx"),
        );
        let cases = [
            ("safetensors", RunnerKind::Mlx, &m),
            ("gguf", RunnerKind::Llamacpp, &l),
            ("", RunnerKind::Llamacpp, &l),
        ];
        for (format, kind, bin) in cases {
            assert_eq!(RunnerKind::for_format(format), kind, "{format}");
            assert_eq!(&binary(kind, &l, &m), bin, "{format}");
        }
    }
}
