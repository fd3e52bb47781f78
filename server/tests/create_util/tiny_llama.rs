//! A tiny random-weight llama GGUF (F16, BF16 or F32 matrices, F32 norms) that llama.cpp loads
//! and generates from: 2 blocks, 256-dim (so k-quants apply to every matrix without fallback),
//! 4 heads / 2 KV heads, FFN 512, and a sentencepiece-style vocab of 3 specials + 256 byte
//! tokens + a few pieces, so any text tokenizes. Deterministic for a given seed. Shared by the
//! server's create tests and runner-llamacpp's quantize test (`#[path]`-included there).
#![allow(dead_code)]

use server::gguf::{GgmlType, GgufBuilder};

pub const EMBD: u64 = 256;
pub const FF: u64 = 512;
pub const LAYERS: u64 = 2;
const HEADS: u32 = 4;
const KV_HEADS: u32 = 2;

/// Number of tensors the model has (llama.cpp reports progress over this many).
pub const TENSORS: u64 = 3 + 9 * LAYERS;

struct Rng(u64);

impl Rng {
    /// Uniform in [-0.08, 0.08): small enough that activations stay finite in any precision.
    fn weight(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.16
    }
}

/// f32 → IEEE half (truncating the mantissa; values this small never overflow).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        sign
    } else if exp >= 31 {
        sign | 0x7c00
    } else {
        sign | ((exp as u16) << 10) | ((b & 0x7f_ffff) >> 13) as u16
    }
}

fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    // Sentencepiece word pieces ("▁" marks a word start), then single letters.
    let words = [
        "", "the", "a", "is", "of", "Paris", "capital", "France", "Hello", "world",
    ];
    for w in words {
        tokens.push(format!("\u{2581}{w}"));
        types.push(1);
    }
    for c in "etaoinshrdlucmfwgypbvk".chars() {
        tokens.push(c.to_string());
        types.push(1);
    }
    let scores = (0..tokens.len())
        .map(|i| if types[i] == 1 { -(i as f32) } else { 0.0 })
        .collect();
    (tokens, scores, types)
}

/// The GGUF bytes; `ty` is the matrices' type (F16, BF16 or F32).
pub fn tiny_llama(ty: GgmlType, seed: u64) -> Vec<u8> {
    let (tokens, scores, types) = vocab();
    let n_vocab = tokens.len() as u64;
    let file_type: u32 = match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::BF16 => 32,
        _ => panic!("tiny_llama: matrices must be F32, F16 or BF16"),
    };
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut matrix = |rows: u64, cols: u64| -> Vec<u8> {
        let n = rows * cols;
        let mut out = Vec::with_capacity((n * 4) as usize);
        for _ in 0..n {
            let w = rng.weight();
            match ty {
                GgmlType::F32 => out.extend_from_slice(&w.to_le_bytes()),
                GgmlType::F16 => out.extend_from_slice(&f16_bits(w).to_le_bytes()),
                _ => out.extend_from_slice(&((w.to_bits() >> 16) as u16).to_le_bytes()),
            }
        }
        out
    };
    let ones = |n: u64| -> Vec<u8> { (0..n).flat_map(|_| 1f32.to_le_bytes()).collect() };
    let kv_dim = EMBD / u64::from(HEADS) * u64::from(KV_HEADS);
    let mut b = GgufBuilder::new()
        .kv("general.architecture", "llama")
        .kv("general.name", "tiny-random-llama")
        .kv("general.file_type", file_type)
        .kv("llama.context_length", 512u32)
        .kv("llama.embedding_length", EMBD as u32)
        .kv("llama.block_count", LAYERS as u32)
        .kv("llama.feed_forward_length", FF as u32)
        .kv("llama.attention.head_count", HEADS)
        .kv("llama.attention.head_count_kv", KV_HEADS)
        .kv("llama.rope.dimension_count", (EMBD as u32) / HEADS)
        .kv("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .kv("tokenizer.ggml.model", "llama")
        .kv("tokenizer.ggml.tokens", tokens)
        .kv("tokenizer.ggml.scores", scores)
        .kv("tokenizer.ggml.token_type", types)
        .kv("tokenizer.ggml.unknown_token_id", 0u32)
        .kv("tokenizer.ggml.bos_token_id", 1u32)
        .kv("tokenizer.ggml.eos_token_id", 2u32)
        .kv("tokenizer.ggml.add_bos_token", true)
        .tensor(
            "token_embd.weight",
            ty,
            &[EMBD, n_vocab],
            matrix(n_vocab, EMBD),
        )
        .tensor("output_norm.weight", GgmlType::F32, &[EMBD], ones(EMBD))
        .tensor("output.weight", ty, &[EMBD, n_vocab], matrix(n_vocab, EMBD));
    for i in 0..LAYERS {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        b = b
            .tensor(&n("attn_norm"), GgmlType::F32, &[EMBD], ones(EMBD))
            .tensor(&n("attn_q"), ty, &[EMBD, EMBD], matrix(EMBD, EMBD))
            .tensor(&n("attn_k"), ty, &[EMBD, kv_dim], matrix(kv_dim, EMBD))
            .tensor(&n("attn_v"), ty, &[EMBD, kv_dim], matrix(kv_dim, EMBD))
            .tensor(&n("attn_output"), ty, &[EMBD, EMBD], matrix(EMBD, EMBD))
            .tensor(&n("ffn_norm"), GgmlType::F32, &[EMBD], ones(EMBD))
            .tensor(&n("ffn_gate"), ty, &[EMBD, FF], matrix(FF, EMBD))
            .tensor(&n("ffn_up"), ty, &[EMBD, FF], matrix(FF, EMBD))
            .tensor(&n("ffn_down"), ty, &[FF, EMBD], matrix(EMBD, FF));
    }
    b.build().expect("tiny llama fixture")
}

/// A LoRA adapter GGUF for [`tiny_llama`] (llama.cpp's adapter layout: `general.type` adapter,
/// `adapter.type` lora, `<tensor>.lora_a` [in, rank] and `.lora_b` [rank, out], F32), on the
/// output projection, with weights large enough that greedy output changes. `arch` lets a test
/// build one that does not fit the model.
pub fn tiny_lora(seed: u64, arch: &str) -> Vec<u8> {
    const RANK: u64 = 4;
    let n_vocab = vocab().0.len() as u64;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut f32s = |n: u64, scale: f32| -> Vec<u8> {
        (0..n)
            .flat_map(|_| (rng.weight() * scale).to_le_bytes())
            .collect()
    };
    GgufBuilder::new()
        .kv("general.architecture", arch)
        .kv("general.type", "adapter")
        .kv("adapter.type", "lora")
        .kv("adapter.lora.alpha", RANK as f32)
        .tensor(
            "output.weight.lora_a",
            GgmlType::F32,
            &[EMBD, RANK],
            f32s(EMBD * RANK, 50.0),
        )
        .tensor(
            "output.weight.lora_b",
            GgmlType::F32,
            &[RANK, n_vocab],
            f32s(RANK * n_vocab, 50.0),
        )
        .build()
        .expect("tiny lora fixture")
}
