//! Memory a runner is predicted to need before it is started: the model file plus its KV cache
//! (Ollama's `PredictServerVRAM` idea), and the budget all runners share. Pure arithmetic over
//! numbers the caller reads from GGUF metadata, the config and runners' `/info`; compute buffers
//! are not modelled before load, so the estimate is a lower bound that the runner's own report
//! replaces once it is ready.

use runner_protocol::LoadOptions;

/// The GGUF facts the estimate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryInputs {
    /// Bytes of the model file (weights).
    pub file_size: u64,
    /// `<arch>.block_count`.
    pub n_layers: u32,
    /// Key width per token per layer: key head size × `head_count_kv`.
    pub n_embd_k_gqa: u32,
    /// Value width per token per layer: value head size × `head_count_kv`.
    pub n_embd_v_gqa: u32,
    /// Vocabulary size (`tokenizer.ggml.tokens`): sizes the logits compute buffer.
    pub n_vocab: u32,
}

impl MemoryInputs {
    /// From the usual GGUF keys: `embedding_length`, `attention.head_count`,
    /// `attention.head_count_kv` (defaults to `head_count`), and the optional
    /// `attention.key_length` / `attention.value_length` (default `embedding_length / head_count`).
    pub fn from_heads(
        file_size: u64,
        n_layers: u32,
        n_embd: u32,
        n_head: u32,
        n_head_kv: Option<u32>,
        key_length: Option<u32>,
        value_length: Option<u32>,
    ) -> Self {
        let head_dim = n_embd.checked_div(n_head).unwrap_or(0);
        let n_head_kv = n_head_kv.unwrap_or(n_head);
        Self {
            file_size,
            n_layers,
            n_embd_k_gqa: key_length.unwrap_or(head_dim) * n_head_kv,
            n_embd_v_gqa: value_length.unwrap_or(head_dim) * n_head_kv,
            n_vocab: 0,
        }
    }
}

/// KV cache bytes for `n_parallel` slots of `n_ctx` tokens each.
pub fn kv_cache_bytes(
    m: &MemoryInputs,
    n_ctx: u32,
    n_parallel: u32,
    bytes_per_element: f64,
) -> u64 {
    let elements = m.n_layers as f64
        * n_ctx as f64
        * n_parallel.max(1) as f64
        * (m.n_embd_k_gqa as f64 + m.n_embd_v_gqa as f64);
    (elements * bytes_per_element).ceil() as u64
}

/// The compute buffer's dominant term: f32 logits for one micro-batch (llama.cpp reserves the
/// graph for `min(n_ctx, n_ubatch)` tokens). Measured on SmolLM2 (49k vocab) and gemma3 (262k)
/// this is 90–96% of the compute buffer at Ollama's batch 512.
pub fn logits_bytes(m: &MemoryInputs, n_tokens: u32) -> u64 {
    4 * u64::from(n_tokens) * u64::from(m.n_vocab)
}

/// Predicted bytes for a runner loaded with `opts`: model file + KV cache + logits buffer.
pub fn estimate(m: &MemoryInputs, opts: &LoadOptions) -> u64 {
    let n_ctx = opts.ctx_size.saturating_mul(opts.parallel.max(1));
    m.file_size
        + kv_cache_bytes(
            m,
            opts.ctx_size,
            opts.parallel,
            opts.kv_cache_type.bytes_per_element(),
        )
        + logits_bytes(m, opts.ubatch.min(n_ctx))
}

/// The bytes all loaded runners may hold together, and whether a model that alone exceeds
/// them is refused before it is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    /// Refuse a model bigger than `bytes` with Ollama's "requires more system memory" error.
    /// Off for a GPU budget: llama.cpp then offloads what fits and keeps the rest in RAM.
    pub hard: bool,
}

/// The memory budget: `HERD_MEMORY_BUDGET` when set (hard); else, once a runner has reported
/// GPUs, their total memory less `OLLAMA_GPU_OVERHEAD` each (soft: a bigger model is still
/// tried, partly offloaded); else host RAM available at startup (hard, as Ollama on CPU).
pub fn budget(
    override_bytes: Option<u64>,
    gpu_overhead: u64,
    gpu_totals: &[u64],
    system_available: Option<u64>,
) -> Option<Budget> {
    if let Some(bytes) = override_bytes {
        return Some(Budget { bytes, hard: true });
    }
    if !gpu_totals.is_empty() {
        let bytes = gpu_totals
            .iter()
            .map(|t| t.saturating_sub(gpu_overhead))
            .sum();
        return Some(Budget { bytes, hard: false });
    }
    system_available.map(|bytes| Budget { bytes, hard: true })
}

/// Ollama's default context when `OLLAMA_CONTEXT_LENGTH` is 0: by total GPU memory (less the
/// overhead), ≥ 47 GiB → 262144, ≥ 23 GiB → 32768, else (CPU-only included) 4096.
pub fn default_num_ctx(gpu_totals: &[u64], gpu_overhead: u64) -> u32 {
    const GIB: u64 = 1 << 30;
    let vram: u64 = gpu_totals
        .iter()
        .map(|t| t.saturating_sub(gpu_overhead))
        .sum();
    if vram >= 47 * GIB {
        262_144
    } else if vram >= 23 * GIB {
        32_768
    } else {
        4096
    }
}

/// The tier default capped by what fits: halves `opts.ctx_size` (never below 4096, the lowest
/// tier) until the estimate fits `budget`.
pub fn fit_num_ctx(m: &MemoryInputs, opts: &LoadOptions, budget: u64) -> u32 {
    let mut o = opts.clone();
    while o.ctx_size > 4096 && estimate(m, &o) > budget {
        o.ctx_size = (o.ctx_size / 2).max(4096);
    }
    o.ctx_size
}

/// `OLLAMA_MAX_LOADED_MODELS`: the configured value, or 0 = 3 per GPU (3 without GPUs).
pub fn max_loaded(configured: usize, n_gpus: usize) -> usize {
    if configured > 0 {
        configured
    } else {
        3 * n_gpus.max(1)
    }
}

/// Host RAM available now (`MemAvailable` in /proc/meminfo), `None` where it cannot be read.
pub fn system_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Ollama's `format.HumanBytes2`: binary units with one decimal.
pub fn human_bytes2(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f >= KIB * KIB * KIB {
        format!("{:.1} GiB", f / (KIB * KIB * KIB))
    } else if f >= KIB * KIB {
        format!("{:.1} MiB", f / (KIB * KIB))
    } else if f >= KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_protocol::KvCacheType;

    #[test]
    fn budget_table() {
        let hard = |bytes| Some(Budget { bytes, hard: true });
        let soft = |bytes| Some(Budget { bytes, hard: false });
        // (override, overhead, gpu totals, system available) → budget
        type Row<'a> = (Option<u64>, u64, &'a [u64], Option<u64>, Option<Budget>);
        let cases: [Row<'_>; 6] = [
            (Some(500), 0, &[], Some(9000), hard(500)),
            (Some(500), 100, &[8000], Some(9000), hard(500)),
            (None, 0, &[], Some(9000), hard(9000)),
            (None, 100, &[8000, 4000], Some(9000), soft(7900 + 3900)),
            (None, 9000, &[8000], None, soft(0)),
            (None, 0, &[], None, None),
        ];
        for (o, overhead, gpus, sys, want) in cases {
            assert_eq!(
                budget(o, overhead, gpus, sys),
                want,
                "{o:?} {overhead} {gpus:?}"
            );
        }
    }

    #[test]
    fn context_tiers_and_fit_table() {
        const GIB: u64 = 1 << 30;
        for (gpus, overhead, want) in [
            (&[][..], 0, 4096),
            (&[16 * GIB][..], 0, 4096),
            (&[24 * GIB][..], 0, 32_768),
            (&[24 * GIB][..], 2 * GIB, 4096),
            (&[12 * GIB, 12 * GIB][..], 0, 32_768),
            (&[141 * GIB][..], 0, 262_144),
            (&[48 * GIB][..], GIB, 262_144),
            (&[48 * GIB][..], 2 * GIB, 32_768),
        ] {
            assert_eq!(default_num_ctx(gpus, overhead), want, "{gpus:?} {overhead}");
        }
        // An 8B-like model: 32 layers, 1024-wide K and V, 128k vocab, 4.9 GB of weights.
        let m = MemoryInputs {
            file_size: 4_900_000_000,
            n_layers: 32,
            n_embd_k_gqa: 1024,
            n_embd_v_gqa: 1024,
            n_vocab: 128_256,
        };
        let at = |ctx| LoadOptions {
            ctx_size: ctx,
            parallel: 1,
            ..Default::default()
        };
        // 131072 B of KV a token: 262144 tokens = 32 GiB of KV.
        for (budget, want) in [
            (150 * GIB, 262_144),
            (30 * GIB, 131_072),
            (10 * GIB, 32_768),
            (6 * GIB, 8192),
            (11 * GIB / 2, 4096),
            (GIB, 4096),
        ] {
            assert_eq!(fit_num_ctx(&m, &at(262_144), budget), want, "{budget}");
        }
        // Never raised: a smaller request stays as it is.
        assert_eq!(fit_num_ctx(&m, &at(2048), GIB), 2048);
    }

    #[test]
    fn max_loaded_and_human_bytes_tables() {
        for (configured, gpus, want) in [(0, 0, 3), (0, 1, 3), (0, 4, 12), (2, 4, 2), (5, 0, 5)] {
            assert_eq!(max_loaded(configured, gpus), want, "{configured} {gpus}");
        }
        for (b, want) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1536, "1.5 KiB"),
            (200 * 1024 * 1024, "200.0 MiB"),
            (47_244_640_256, "44.0 GiB"),
        ] {
            assert_eq!(human_bytes2(b), want);
        }
        assert!(
            system_available().is_some_and(|b| b > 0),
            "Linux has /proc/meminfo"
        );
    }

    #[test]
    fn gqa_widths_from_heads() {
        // SmolLM2-135M: 576 wide, 9 heads, 3 KV heads → head 64, GQA width 192.
        let m = MemoryInputs::from_heads(0, 30, 576, 9, Some(3), None, None);
        assert_eq!((m.n_embd_k_gqa, m.n_embd_v_gqa), (192, 192));
        // gemma3-270m: explicit key/value length 256, 1 KV head.
        let m = MemoryInputs::from_heads(0, 18, 640, 4, Some(1), Some(256), Some(256));
        assert_eq!((m.n_embd_k_gqa, m.n_embd_v_gqa), (256, 256));
        // No head count in the metadata: no KV cache rather than a division by zero.
        let m = MemoryInputs::from_heads(0, 18, 640, 0, None, None, None);
        assert_eq!(m.n_embd_k_gqa, 0);
    }

    #[test]
    fn estimate_table() {
        let smol = MemoryInputs {
            file_size: 100_000_000,
            n_layers: 30,
            n_embd_k_gqa: 192,
            n_embd_v_gqa: 192,
            n_vocab: 0,
        };
        let opts = |ctx, parallel, kv| LoadOptions {
            ctx_size: ctx,
            parallel,
            kv_cache_type: kv,
            ..Default::default()
        };
        // 30 layers × 4096 ctx × 1 slot × 384 × 2 bytes = 94_371_840.
        let cases = [
            (opts(4096, 1, KvCacheType::F16), 100_000_000 + 94_371_840),
            (
                opts(4096, 2, KvCacheType::F16),
                100_000_000 + 2 * 94_371_840,
            ),
            (
                opts(8192, 1, KvCacheType::F16),
                100_000_000 + 2 * 94_371_840,
            ),
            // q8_0: 34 bytes per 32 elements.
            (
                opts(4096, 1, KvCacheType::Q8_0),
                100_000_000 + 94_371_840 / 2 * 34 / 32,
            ),
            (
                opts(4096, 1, KvCacheType::Q4_0),
                100_000_000 + 94_371_840 / 2 * 18 / 32,
            ),
            // parallel 0 is treated as one slot.
            (opts(4096, 0, KvCacheType::F16), 100_000_000 + 94_371_840),
        ];
        for (o, want) in cases {
            assert_eq!(estimate(&smol, &o), want, "{o:?}");
        }
        // With a vocabulary: 4 bytes × min(ubatch, ctx × parallel) × vocab more.
        let smol = MemoryInputs {
            n_vocab: 49152,
            ..smol
        };
        let with_batch = |ctx, parallel, ubatch| LoadOptions {
            ubatch,
            ..opts(ctx, parallel, KvCacheType::F16)
        };
        let kv = 94_371_840 / 4096;
        let cases = [
            (with_batch(4096, 1, 512), 4096 * kv + 4 * 512 * 49152),
            (with_batch(4096, 1, 2048), 4096 * kv + 4 * 2048 * 49152),
            (with_batch(256, 1, 512), 256 * kv + 4 * 256 * 49152),
            (with_batch(256, 4, 512), 4 * 256 * kv + 4 * 512 * 49152),
        ];
        for (o, want) in cases {
            assert_eq!(estimate(&smol, &o), 100_000_000 + want, "{o:?}");
        }
    }
}
