//! The batch and micro-batch a model loads with (the runner's `--batch`/`--ubatch`, llama.cpp's
//! `n_batch`/`n_ubatch`), as Ollama launches llama-server: the micro-batch always equals the
//! batch (`-b N -ub N`, llm/llama_server.go appendBatchArgs), a `num_batch` the model or the
//! request set wins, and unset it is Ollama's default for the kind of model — 2048 capped at the
//! context for an embedding model (llm.DefaultEmbeddingNumBatch), and for a generation model
//! 512, 1024 or 2048 by context length and memory headroom (server/sched.go
//! automaticGenerationBatch). Pure, table-tested policy; `plan::load_options` applies it.

/// Ollama's `num_batch` default, and the automatic batch of a short context.
pub const DEFAULT: u32 = 512;
/// The automatic batch on a small CUDA GPU without flash attention.
const CONSTRAINED: u32 = 256;
const MEDIUM: u32 = 1024;
const LARGE: u32 = 2048;

/// Ollama's default `num_batch` for an embedding model (llm.DefaultEmbeddingNumBatch).
pub const EMBEDDING_NUM_BATCH: u32 = 2048;

/// llama-server's own batch and micro-batch (common_params), which a generation model gets when
/// its `num_batch` is set but not positive: Ollama then passes no `-b`/`-ub` at all.
const SERVER_DEFAULT: (u32, u32) = (2048, 512);

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// An embedding model's batch, which is also its micro-batch: a pooled input goes through the
/// model in one micro-batch, so the micro-batch bounds how many tokens an input may have
/// (runner-llamacpp truncates, or with `truncate: false` refuses, past it). `num_batch` as the
/// model or the request set it wins; unset, it is 2048 capped at the context, as Ollama runs
/// embedding models (`-b N -ub N`), rather than the generation default of 512, which cut
/// every input longer than 512 tokens.
pub fn embedding_batch(num_batch: Option<i64>, ctx_size: u32) -> u32 {
    match num_batch.filter(|&b| b > 0) {
        Some(b) => u32::try_from(b).unwrap_or(u32::MAX),
        None if ctx_size > 0 => EMBEDDING_NUM_BATCH.min(ctx_size),
        None => EMBEDDING_NUM_BATCH,
    }
}

/// A generation model's `(batch, ubatch)`: a positive `num_batch` is both (Ollama's `-b N
/// -ub N`; before, herd kept a 512 micro-batch under any batch, so a `num_batch` of 2048 still
/// prefilled in 512-token steps); one set to 0 or less is llama-server's own 2048/512; unset,
/// both are `auto()` ([`automatic_generation`]).
pub fn generation(num_batch: Option<i64>, auto: impl FnOnce() -> u32) -> (u32, u32) {
    match num_batch {
        Some(b) if b > 0 => {
            let b = u32::try_from(b).unwrap_or(u32::MAX);
            (b, b)
        }
        Some(_) => SERVER_DEFAULT,
        None => {
            let b = auto();
            (b, b)
        }
    }
}

/// Ollama's automatic batch for a generation model whose `num_batch` nobody set.
/// `effective_ctx` is the context of all slots (`num_ctx` × parallel); `predicted` the bytes
/// the load is predicted to take at the default batch, `available` the GPU memory it may use
/// (0: unknown, e.g. CPU-only, which never holds a batch back). `cuda_without_fa` is
/// `Some(smallest CUDA GPU's memory)` when flash attention is off on a CUDA GPU, where a bigger
/// batch only grows the attention buffers: the default then, or 256 on a GPU of 8 GiB or less
/// once the context passes 4096.
pub fn automatic_generation(
    effective_ctx: u64,
    predicted: u64,
    available: u64,
    cuda_without_fa: Option<u64>,
) -> u32 {
    if let Some(smallest) = cuda_without_fa {
        let constrained = effective_ctx > 4096 && smallest > 0 && smallest <= 8 * GIB;
        return if constrained { CONSTRAINED } else { DEFAULT };
    }
    let mut batch = match effective_ctx {
        c if c > 32768 => LARGE,
        c if c > 4096 => MEDIUM,
        _ => DEFAULT,
    };
    while batch > DEFAULT && !fits(batch, predicted, available) {
        batch = if batch > MEDIUM { MEDIUM } else { DEFAULT };
    }
    batch
}

/// Whether `batch`'s extra compute buffers fit beside the load: the load stays under 80% of the
/// memory with the batch's surcharge, and under 60% (2048) or 75% (1024) without it.
fn fits(batch: u32, predicted: u64, available: u64) -> bool {
    if predicted == 0 || available == 0 {
        return true;
    }
    let percent = |p: u64| (u128::from(available) * u128::from(p) / 100) as u64;
    let threshold = percent(80);
    let headroom = match batch {
        b if b >= LARGE => percent(60),
        b if b >= MEDIUM => percent(75),
        _ => available,
    };
    predicted <= threshold && predicted <= headroom && surcharge(batch) <= threshold - predicted
}

/// Ollama's allowance for a batch's bigger compute buffers (generationBatchSurcharge).
fn surcharge(batch: u32) -> u64 {
    match batch {
        b if b >= LARGE => 2 * GIB,
        b if b >= MEDIUM => 768 * MIB,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// server/sched_test.go TestAutomaticGenerationBatch, case for case, plus the edges.
    #[test]
    fn automatic_generation_batch_table() {
        let cuda = |gib: u64| Some(gib * GIB);
        // (name, effective ctx, predicted, available, FA off on CUDA) → batch
        type Case = (&'static str, u64, u64, u64, Option<u64>, u32);
        let cases: [Case; 13] = [
            ("small context keeps default", 4096, 0, 0, None, 512),
            ("medium context, unknown memory", 32768, 0, 0, None, 1024),
            (
                "large context with headroom",
                131072,
                8 * GIB,
                14 * GIB,
                None,
                2048,
            ),
            (
                "large, no 2048 headroom",
                131072,
                9 * GIB,
                14 * GIB,
                None,
                1024,
            ),
            (
                "large, steps down for headroom",
                131072,
                8 * GIB,
                11 * GIB,
                None,
                1024,
            ),
            (
                "medium, steps down to 512",
                32768,
                8500 * MIB,
                11 * GIB,
                None,
                512,
            ),
            ("FA off on CUDA", 131072, 8 * GIB, 14 * GIB, cuda(14), 512),
            (
                "FA off on a small CUDA GPU",
                131072,
                3 * GIB,
                6 * GIB,
                cuda(6),
                256,
            ),
            (
                "FA off, small GPU, short ctx",
                4096,
                3 * GIB,
                6 * GIB,
                cuda(6),
                512,
            ),
            ("just past 4096", 4097, 0, 0, None, 1024),
            ("just past 32768", 32769, 0, 0, None, 2048),
            ("CPU: large context", 262144, 0, 0, None, 2048),
            ("over 80% of memory", 131072, 12 * GIB, 14 * GIB, None, 512),
        ];
        for (name, ctx, predicted, available, fa, want) in cases {
            assert_eq!(
                automatic_generation(ctx, predicted, available, fa),
                want,
                "{name}"
            );
        }
    }

    /// A set `num_batch` is both the batch and the micro-batch (appendBatchArgs); a
    /// non-positive one leaves llama-server's defaults; unset is the automatic batch.
    #[test]
    fn generation_batch_table() {
        let cases = [
            (Some(2048), (2048, 2048)),
            (Some(32), (32, 32)),
            (Some(512), (512, 512)),
            (Some(0), (2048, 512)),
            (Some(-1), (2048, 512)),
            (Some(i64::MAX), (u32::MAX, u32::MAX)),
            (None, (1024, 1024)),
        ];
        for (set, want) in cases {
            assert_eq!(generation(set, || 1024), want, "{set:?}");
        }
    }

    /// routes_options_test.go TestModelOptionsEmbeddingNumBatchDefault: (num_batch set by the
    /// model or request, ctx) → batch.
    #[test]
    fn embedding_batch_defaults_to_2048_capped_at_the_context() {
        let cases = [
            (None, 40960, 2048),
            (None, 1024, 1024),
            (None, 0, 2048),
            (Some(1024), 40960, 1024),
            (Some(4096), 40960, 4096),
            (Some(0), 8192, 2048),
            (Some(-1), 512, 512),
        ];
        for (set, ctx, want) in cases {
            assert_eq!(embedding_batch(set, ctx), want, "{set:?} {ctx}");
        }
    }
}
