//! Tiny Hugging Face checkpoints for the conversion tests, generated here: config.json, a
//! random-weight model.safetensors (bf16, f16 or f32, deterministic), and real tokenizer files.
//!
//! Tokenizers: the reference converter identifies a BPE pre-tokenizer by hashing the token ids a
//! full Hugging Face tokenizer produces, so a made-up BPE vocab is refused by it. The BPE
//! checkpoints therefore carry SmolLM2's real tokenizer, rebuilt as tokenizer.json from the
//! SmolLM2 test GGUF (its tokens, types and merges) with SmolLM's pre-tokenizer (the reference
//! recognises it as `smollm`). The SentencePiece checkpoint carries a small synthetic
//! tokenizer.model (specials, 256 byte pieces, a few words), which needs no detection.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value as Json};
use server::convert::safetensors::{encode_header, Dtype};
use server::convert::spm::{encode_pieces, Piece, PieceType};
use server::gguf::{self, ArrayValues, ReadOptions, Value};

pub const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The test models' directory (fetched by scripts/fetch-test-models when missing).
pub fn models_dir() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-test-models");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("run fetch-test-models");
    assert!(
        out.status.success(),
        "fetch-test-models: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

pub struct Shape {
    pub hidden: u64,
    pub ff: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub layers: u64,
}

pub const TINY: Shape = Shape {
    hidden: 64,
    ff: 128,
    heads: 4,
    kv_heads: 2,
    head_dim: 16,
    layers: 2,
};

/// Deterministic xorshift64* stream.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Random values as raw little-endian bits: `near_one` gives [1, 2) (llama-style norms), else
/// magnitudes in [2^-6, 2^-2) with random sign. Built from bits, so every dtype gets values
/// that use its full mantissa (f32 → f16 rounding is exercised).
pub fn fill(rng: &mut Rng, dtype: Dtype, n: u64, near_one: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity((n * dtype.size()) as usize);
    for _ in 0..n {
        let r = rng.next();
        let sign = if near_one { 0 } else { (r >> 63) as u32 };
        let e_off = if near_one { 0 } else { 2 + (r >> 40) % 4 } as u32; // 2^-2 .. 2^-5 (×[1,2))
        let f32_bits = (sign << 31) | ((127 - e_off) << 23) | ((r as u32) & 0x007f_ffff);
        match dtype {
            Dtype::F32 => out.extend_from_slice(&f32_bits.to_le_bytes()),
            Dtype::BF16 => out.extend_from_slice(&((f32_bits >> 16) as u16).to_le_bytes()),
            Dtype::F16 => {
                let h = ((sign << 15) | ((15 - e_off) << 10) | ((r as u32) & 0x3ff)) as u16;
                out.extend_from_slice(&h.to_le_bytes())
            }
        }
    }
    out
}

/// The Hugging Face tensors of `arch` with shape `s` and vocab `v`, in a fixed order.
pub fn tensor_list(arch: Arch, s: &Shape, v: u64) -> Vec<(String, Vec<u64>, bool)> {
    let (h, q, kv) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    // Gemma stores norm weights minus one: small values; the others store them as is.
    let norm_one = arch != Arch::Gemma3;
    let mut t = vec![("model.embed_tokens.weight".to_owned(), vec![v, h], false)];
    for l in 0..s.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        t.push((p("input_layernorm.weight"), vec![h], norm_one));
        t.push((p("post_attention_layernorm.weight"), vec![h], norm_one));
        t.push((p("self_attn.q_proj.weight"), vec![q, h], false));
        t.push((p("self_attn.k_proj.weight"), vec![kv, h], false));
        t.push((p("self_attn.v_proj.weight"), vec![kv, h], false));
        t.push((p("self_attn.o_proj.weight"), vec![h, q], false));
        t.push((p("mlp.gate_proj.weight"), vec![s.ff, h], false));
        t.push((p("mlp.up_proj.weight"), vec![s.ff, h], false));
        t.push((p("mlp.down_proj.weight"), vec![h, s.ff], false));
        match arch {
            Arch::Qwen2 => {
                t.push((p("self_attn.q_proj.bias"), vec![q], false));
                t.push((p("self_attn.k_proj.bias"), vec![kv], false));
                t.push((p("self_attn.v_proj.bias"), vec![kv], false));
            }
            Arch::Qwen3 | Arch::Gemma3 => {
                t.push((p("self_attn.q_norm.weight"), vec![s.head_dim], norm_one));
                t.push((p("self_attn.k_norm.weight"), vec![s.head_dim], norm_one));
            }
            Arch::Llama => {}
        }
        if arch == Arch::Gemma3 {
            t.push((p("pre_feedforward_layernorm.weight"), vec![h], false));
            t.push((p("post_feedforward_layernorm.weight"), vec![h], false));
        }
    }
    t.push(("model.norm.weight".to_owned(), vec![h], norm_one));
    if arch == Arch::Llama {
        t.push(("lm_head.weight".to_owned(), vec![v, h], false));
    }
    t
}

/// Writes model.safetensors (or `file`) for the tensor list, streaming the random data.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, Vec<u64>, bool)],
    dtype: Dtype,
    seed: u64,
) {
    use std::io::Write;
    let entries: Vec<(&str, Dtype, &[u64])> = tensors
        .iter()
        .map(|(n, s, _)| (n.as_str(), dtype, s.as_slice()))
        .collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&encode_header(&entries)).unwrap();
    let mut rng = Rng::new(seed);
    for (_, shape, one) in tensors {
        f.write_all(&fill(&mut rng, dtype, shape.iter().product(), *one))
            .unwrap();
    }
    f.flush().unwrap();
}

pub fn config(arch: Arch, s: &Shape, vocab: u64, dtype: Dtype) -> Json {
    let dt = match dtype {
        Dtype::F32 => "float32",
        Dtype::F16 => "float16",
        Dtype::BF16 => "bfloat16",
    };
    let mut c = json!({
        "hidden_size": s.hidden, "intermediate_size": s.ff, "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads, "num_hidden_layers": s.layers, "vocab_size": vocab,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "torch_dtype": dt,
        "hidden_act": "silu"
    });
    let extra = match arch {
        Arch::Llama => json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "rope_theta": 10000.0, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}),
        Arch::Qwen2 => json!({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "rope_theta": 1000000.0, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}),
        Arch::Qwen3 => json!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "head_dim": s.head_dim, "rope_theta": 1000000.0, "tie_word_embeddings": true,
            "bos_token_id": 1, "eos_token_id": 2}),
        Arch::Gemma3 => json!({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "head_dim": s.head_dim, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "sliding_window": 32, "query_pre_attn_scalar": s.head_dim, "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}),
    };
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

fn strings(g: &gguf::GgufFile, key: &str) -> Vec<String> {
    match g.get(key) {
        Some(Value::Array(a)) => match &a.values {
            Some(ArrayValues::String(v)) => v.clone(),
            _ => panic!("{key}: not a string array"),
        },
        _ => panic!("{key} missing"),
    }
}

/// SmolLM2's tokenizer as tokenizer.json + tokenizer_config.json in `dir`. Returns its size.
pub fn smollm_tokenizer(dir: &Path) -> u64 {
    let g = gguf::read_path(&models_dir().join(SMOL), ReadOptions { full_arrays: true }).unwrap();
    let tokens = strings(&g, "tokenizer.ggml.tokens");
    let merges = strings(&g, "tokenizer.ggml.merges");
    let types = match g.get("tokenizer.ggml.token_type") {
        Some(Value::Array(a)) => match &a.values {
            Some(ArrayValues::I32(v)) => v.clone(),
            _ => panic!("token_type"),
        },
        _ => panic!("token_type"),
    };
    let added: Vec<Json> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == 3)
        .map(|(i, (t, _))| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let vocab: serde_json::Map<String, Json> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let byte_level = |regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": regex});
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true)]},
        "post_processor": byte_level(true),
        "decoder": byte_level(true),
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let template = g
        .get("tokenizer.chat_template")
        .and_then(Value::as_str)
        .unwrap();
    let tc = json!({"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": false,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>", "model_max_length": 8192, "chat_template": template});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    tokens.len() as u64
}

/// A small SentencePiece tokenizer.model (Gemma's special ids: pad 0, eos 1, bos 2, unk 3) and
/// tokenizer_config.json in `dir`. Returns its size.
pub fn spm_tokenizer(dir: &Path) -> u64 {
    let piece = |text: &str, score: f32, kind| Piece {
        text: text.to_owned(),
        score,
        kind,
    };
    let mut pieces = vec![
        piece("<pad>", 0.0, PieceType::Control),
        piece("<eos>", 0.0, PieceType::Control),
        piece("<bos>", 0.0, PieceType::Control),
        piece("<unk>", 0.0, PieceType::Unknown),
    ];
    for b in 0..=255u8 {
        pieces.push(piece(&format!("<0x{b:02X}>"), 0.0, PieceType::Byte));
    }
    let words = [
        "▁", "▁the", "▁a", "▁cat", "▁sat", "▁on", "▁mat", "▁dog", "▁is", "▁big", "e", "t", "a",
        "o", "n", "s", "h", "r", "d", "l", "c", "m", "g", "b", "i", "▁t", "▁s", "▁c", "▁d", "at",
        "he", "in", "on", "og", "ig", "ma", "sa", "ca", "do", "is",
    ];
    for (i, w) in words.iter().enumerate() {
        pieces.push(piece(w, -(i as f32) - 1.0, PieceType::Normal));
    }
    pieces.push(piece("<start_of_turn>", 0.0, PieceType::UserDefined));
    pieces.push(piece("<end_of_turn>", 0.0, PieceType::UserDefined));
    // trainer_spec: model_type BPE, byte_fallback, unk/bos/eos/pad ids; normalizer_spec:
    // identity, no dummy prefix, no whitespace removal, escape whitespace.
    let trainer: &[u8] = &[
        0x18, 0x02, 0x98, 0x02, 0x01, 0xc0, 0x02, 0x03, 0xc8, 0x02, 0x02, 0xd0, 0x02, 0x01, 0xd8,
        0x02, 0x00,
    ];
    let mut trailing = vec![0x12, trainer.len() as u8];
    trailing.extend_from_slice(trainer);
    let normalizer: &[u8] = &[
        0x0a, 0x08, b'i', b'd', b'e', b'n', b't', b'i', b't', b'y', 0x18, 0x00, 0x20, 0x00, 0x28,
        0x01,
    ];
    trailing.extend_from_slice(&[0x1a, normalizer.len() as u8]);
    trailing.extend_from_slice(normalizer);
    std::fs::write(
        dir.join("tokenizer.model"),
        encode_pieces(&pieces, &trailing),
    )
    .unwrap();
    let tc = json!({"add_bos_token": true, "add_eos_token": false, "bos_token": "<bos>",
        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "chat_template": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}",
        "added_tokens_decoder": {
            "0": {"content": "<pad>", "special": true}, "1": {"content": "<eos>", "special": true},
            "2": {"content": "<bos>", "special": true}, "3": {"content": "<unk>", "special": true}}});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    pieces.len() as u64
}

/// A complete tiny checkpoint of `arch` in `dir`.
pub fn checkpoint(dir: &Path, arch: Arch, dtype: Dtype, seed: u64) {
    checkpoint_shards(dir, arch, dtype, seed, 1)
}

/// Like `checkpoint`, split into `shards` files `model-0000i-of-0000n.safetensors` with a
/// model.safetensors.index.json (as large Hugging Face checkpoints ship) when `shards` > 1.
pub fn checkpoint_shards(dir: &Path, arch: Arch, dtype: Dtype, seed: u64, shards: usize) {
    let vocab = match arch {
        Arch::Gemma3 => spm_tokenizer(dir),
        _ => smollm_tokenizer(dir),
    };
    let c = config(arch, &TINY, vocab, dtype);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&c).unwrap(),
    )
    .unwrap();
    let tensors = tensor_list(arch, &TINY, vocab);
    if shards <= 1 {
        write_safetensors(&dir.join("model.safetensors"), &tensors, dtype, seed);
        return;
    }
    let per = tensors.len().div_ceil(shards);
    let mut map = serde_json::Map::new();
    for (i, part) in tensors.chunks(per).enumerate() {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
        write_safetensors(&dir.join(&file), part, dtype, seed + i as u64);
        for (name, _, _) in part {
            map.insert(name.clone(), json!(file));
        }
    }
    let index = json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}
