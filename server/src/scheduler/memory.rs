//! Memory a runner is predicted to need before it is started: the model file plus its KV cache
//! (Ollama's `PredictServerVRAM` idea). Pure arithmetic over numbers the caller reads from GGUF
//! metadata; compute buffers are not modelled, so this is a lower bound the budget leaves room
//! for.

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

/// Predicted bytes for a runner loaded with `opts`: model file + KV cache.
pub fn estimate(m: &MemoryInputs, opts: &LoadOptions) -> u64 {
    m.file_size
        + kv_cache_bytes(
            m,
            opts.ctx_size,
            opts.parallel,
            opts.kv_cache_type.bytes_per_element(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_protocol::KvCacheType;

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
    }
}
