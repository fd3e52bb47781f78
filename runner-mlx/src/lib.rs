//! runner-mlx: herd's engine for safetensors (MLX) checkpoints, through libmlx from the pinned
//! PyPI wheel (native/mlx.lock) and a narrow C++ shim (shim/).
//!
//! Holds the native build, the llama-family forward pass with per-sequence KV caches and
//! multi-sequence steps (ffi + shim/model.cpp), checkpoint and tokenizer loading, the engine
//! thread behind runner-core's socket server (engine.rs, with the pure-Rust sampler chain in
//! sampling.rs), and the GGUF → MLX converter the test model is made with.

pub mod checkpoint;
pub mod convert;
pub mod engine;
pub mod ffi;
pub mod quantize;
pub mod sampling;
pub mod vocab;

/// The engine pin reported by the runner (`mlx-cpu 0.32.4` or `mlx-cuda-13 0.32.4`).
pub const PIN: &str = env!("HERD_MLX_PIN");

/// The engine as `/info` and `version` name it: the pinned package built against, and the
/// libmlx actually loaded with its backend (a build against mlx-cpu runs on the CUDA wheel's
/// library too).
pub fn engine_name() -> String {
    format!("{PIN} (libmlx {} on {})", ffi::version(), ffi::backend())
}

/// The loaded checkpoint: weights on the engine's device plus its vocabulary.
pub struct Loaded {
    pub checkpoint: checkpoint::Checkpoint,
    pub model: ffi::Model,
    pub vocab: vocab::Vocab,
}

/// The dtype a model computes in (activations, dense weights, scales, norms, KV caches; logits
/// are float32 either way).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compute {
    /// float32: CPU results track llama.cpp's f32 path (golden parity).
    #[default]
    F32,
    /// bfloat16, as MLX-LM computes: half the bytes a dense weight and the cache cost a step.
    Bf16,
}

/// Load the MLX checkpoint directory `dir`, to compute in `compute`.
pub fn load(dir: &std::path::Path, compute: Compute) -> Result<Loaded, String> {
    let checkpoint = checkpoint::Checkpoint::open(dir)?;
    let vocab = vocab::Vocab::load(
        &checkpoint.tokenizer,
        checkpoint.shape.n_vocab as usize,
        &checkpoint.eos,
    )?;
    let model = ffi::Model::load(
        &checkpoint.files,
        &checkpoint.quants,
        &checkpoint.shape,
        compute,
    )?;
    Ok(Loaded {
        checkpoint,
        model,
        vocab,
    })
}

/// The pin's pure parts (lock format, wheel choice) are tested with the crate.
#[cfg(test)]
#[path = "../build/recipe.rs"]
mod recipe;

#[cfg(test)]
mod tests {
    use super::recipe::{unpack_dir_name, Lock};

    #[test]
    fn the_pinned_lock_parses_and_herd_gpu_picks_the_wheel() {
        let text = include_str!("../../native/mlx.lock");
        let lock = Lock::parse(text).unwrap();
        assert_eq!(lock.version, "0.32.4");
        assert_eq!(lock.wheel(None).unwrap().package, "mlx-cpu");
        assert_eq!(lock.wheel(Some("cpu")).unwrap().package, "mlx-cpu");
        assert_eq!(lock.wheel(Some("cuda")).unwrap().package, "mlx-cuda-13");
        assert!(lock.wheel(Some("metal")).unwrap_err().contains("metal"));
        assert_eq!(
            unpack_dir_name(lock.wheel(None).unwrap()),
            "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64"
        );
        assert!(crate::PIN.ends_with(&lock.version), "{}", crate::PIN);
    }

    #[test]
    fn bad_locks_are_refused() {
        let good = include_str!("../../native/mlx.lock");
        let cases = [
            (
                good.replace("cpu_sha256 = \"0e0a", "cpu_sha256 = \"ZZZZ"),
                "hex",
            ),
            (
                good.replace("cuda_archive", "cuda_archivex"),
                "missing key `cuda_archive`",
            ),
            (good.replace(".whl\"", ".tar.gz\""), "wheel"),
            (
                good.replace("version = \"0.32.4\"", "version = 0.32.4"),
                "quoted",
            ),
        ];
        for (text, want) in cases {
            let e = Lock::parse(&text).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }
}
