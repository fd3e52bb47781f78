//! Shared helpers for the MLX store tests: a tiny random-weight bf16 Hugging Face checkpoint
//! written in the test (config.json, model.safetensors, tokenizer.json, tokenizer_config.json),
//! the SmolLM2 MLX checkpoint scripts/make-mlx-test-model caches, uploading a directory into a
//! store as a create `files` map, and reading a stored tensor blob's header.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use server::store::Store;

/// ChatML, as SmolLM2's tokenizer_config.json has it (with a `tools` branch when asked).
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The tiny checkpoint's shape.
pub const HIDDEN: u64 = 64;
pub const LAYERS: u64 = 2;
pub const VOCAB: u64 = 96;
pub const FFN: u64 = 128;

/// Deterministic pseudo-random bytes (xorshift), so blobs never dedup by accident.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keep bf16 values finite: clear the exponent's top bit of every high byte.
            (x >> 24) as u8 & 0xBF
        })
        .collect()
}

/// Writes a safetensors file of `(name, dtype, shape, bytes)`.
pub fn write_safetensors(path: &Path, tensors: &[(String, &str, Vec<u64>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut off = 0u64;
    for (name, dtype, shape, bytes) in tensors {
        let end = off + bytes.len() as u64;
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [off, end]}),
        );
        off = end;
    }
    let h = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for (_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    std::fs::write(path, out).unwrap();
}

/// The tensors of a tiny llama (bf16, tied embeddings, GQA 4/2 heads of 16).
pub fn tiny_llama_tensors() -> Vec<(String, &'static str, Vec<u64>, Vec<u8>)> {
    let (h, f, kv) = (HIDDEN, FFN, 32);
    let mut shapes: Vec<(String, Vec<u64>)> = vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, h]),
        ("model.norm.weight".into(), vec![h]),
    ];
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        shapes.extend([
            (format!("{p}.input_layernorm.weight"), vec![h]),
            (format!("{p}.post_attention_layernorm.weight"), vec![h]),
            (format!("{p}.self_attn.q_proj.weight"), vec![h, h]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.o_proj.weight"), vec![h, h]),
            (format!("{p}.mlp.gate_proj.weight"), vec![f, h]),
            (format!("{p}.mlp.up_proj.weight"), vec![f, h]),
            (format!("{p}.mlp.down_proj.weight"), vec![h, f]),
        ]);
    }
    shapes
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n = shape.iter().product::<u64>() as usize * 2;
            (name, "BF16", shape, noise(i as u64 + 1, n))
        })
        .collect()
}

pub fn tiny_config() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 2048, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
    })
}

/// A tokenizer.json for the tiny vocabulary (word-level: its content is the runner's business).
pub fn tiny_tokenizer() -> Value {
    let mut vocab = serde_json::Map::new();
    for i in 0..VOCAB {
        vocab.insert(format!("t{i}"), json!(i));
    }
    json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}})
}

/// Writes the tiny checkpoint into `dir`.
pub fn write_tiny_llama(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let put = |name: &str, v: &Value| {
        std::fs::write(dir.join(name), serde_json::to_vec_pretty(v).unwrap()).unwrap()
    };
    put("config.json", &tiny_config());
    put("tokenizer.json", &tiny_tokenizer());
    put(
        "tokenizer_config.json",
        &json!({"chat_template": CHATML, "bos_token": "t1", "eos_token": "<|im_end|>"}),
    );
    write_safetensors(&dir.join("model.safetensors"), &tiny_llama_tensors());
}

/// The SmolLM2 MLX checkpoint; a missing one fails the test with what to run.
pub fn smollm2_mlx() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let cache =
        std::env::var_os("HERD_CACHE").map_or_else(|| home.join(".cache/herd"), PathBuf::from);
    let dir = cache.join("models/SmolLM2-135M-Instruct-mlx-q4");
    assert!(
        dir.join("model.safetensors").exists(),
        "{} is missing: run scripts/make-mlx-test-model",
        dir.display()
    );
    dir
}

/// Uploads the files `herd create` would send for `dir` (Ollama's filesForModel) as blobs of
/// `store`; returns the `files` map.
pub fn upload_dir(store: &Store, dir: &Path) -> BTreeMap<String, String> {
    let paths = server::cli::create::files_for_model(dir).unwrap();
    let keys = server::cli::create::file_keys(&paths);
    paths
        .iter()
        .zip(keys)
        .map(|(p, k)| {
            let file = std::fs::File::open(p).unwrap();
            let (d, _) = store
                .blobs()
                .write_with(|w| {
                    std::io::copy(&mut &file, w)?;
                    Ok(())
                })
                .unwrap();
            (k, d.to_string())
        })
        .collect()
}

/// A stored blob's safetensors header (JSON) and the data section's start.
pub fn blob_header(path: &Path) -> (Value, usize) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
}

/// Names of the `sha256-*` blobs in a store.
pub fn blob_names(store: &Store) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store.blobs().dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
