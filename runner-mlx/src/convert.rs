//! `runner-mlx convert-gguf GGUF DIR`: a llama-architecture GGUF → an MLX checkpoint directory
//! (model.safetensors through the shim's mx::load_gguf, then config.json and tokenizer.json from
//! the GGUF metadata). Used by scripts/make-mlx-test-model for the SmolLM2 test model.

use crate::ffi;
use serde_json::{json, Map, Value};
use std::path::Path;

fn num(meta: &Map<String, Value>, k: &str) -> Result<f64, String> {
    meta.get(k)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("GGUF metadata lacks {k}"))
}

/// tokenizer.json for a GGUF `gpt2`-model vocabulary (byte-level BPE).
pub fn tokenizer_json(meta: &Map<String, Value>) -> Result<Value, String> {
    if meta.get("tokenizer.ggml.model").and_then(Value::as_str) != Some("gpt2") {
        return Err("only GGUF byte-level BPE (`gpt2`) vocabularies convert".into());
    }
    let pre = meta
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let pre_tokenizer = match pre {
        // llama.cpp's smollm pre-tokenizer: each digit alone, then GPT-2's split.
        "smollm" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level]}),
        "default" | "gpt2" => byte_level,
        other => return Err(format!("GGUF pre-tokenizer {other:?} does not convert yet")),
    };
    let tokens = meta
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .ok_or("GGUF metadata lacks tokenizer.ggml.tokens")?;
    let merges = meta
        .get("tokenizer.ggml.merges")
        .and_then(Value::as_array)
        .ok_or("GGUF metadata lacks tokenizer.ggml.merges")?;
    let types = meta
        .get("tokenizer.ggml.token_type")
        .and_then(Value::as_array);
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let t = t.as_str().ok_or("a GGUF token is not a string")?;
        vocab.insert(t.to_string(), json!(i));
        // llama.cpp token types: 3 = control, 4 = user-defined.
        let ty = types
            .and_then(|a| a.get(i))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if ty == 3 || ty == 4 {
            added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": ty == 3}),
            );
        }
    }
    let add_bos = meta
        .get("tokenizer.ggml.add_bos_token")
        .and_then(Value::as_bool)
        == Some(true);
    let post = if add_bos {
        let bos = num(meta, "tokenizer.ggml.bos_token_id")? as usize;
        let text = tokens
            .get(bos)
            .and_then(Value::as_str)
            .ok_or("bos id outside the vocabulary")?;
        json!({"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {text: {"id": text, "ids": [bos], "tokens": [text]}}})
    } else {
        Value::Null
    };
    Ok(json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges},
    }))
}

/// config.json (Hugging Face llama keys) from the GGUF hyperparameters.
pub fn config_json(meta: &Map<String, Value>, tied: bool) -> Result<Value, String> {
    let n_vocab = meta
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .map(Vec::len)
        .ok_or("GGUF metadata lacks tokenizer.ggml.tokens")?;
    let n_embd = num(meta, "llama.embedding_length")?;
    let n_head = num(meta, "llama.attention.head_count")?;
    Ok(json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd as u64,
        "intermediate_size": num(meta, "llama.feed_forward_length")? as u64,
        "num_hidden_layers": num(meta, "llama.block_count")? as u64,
        "num_attention_heads": n_head as u64,
        "num_key_value_heads": num(meta, "llama.attention.head_count_kv")? as u64,
        "head_dim": meta.get("llama.attention.key_length").and_then(Value::as_f64).unwrap_or(n_embd / n_head) as u64,
        "vocab_size": n_vocab,
        "rms_norm_eps": num(meta, "llama.attention.layer_norm_rms_epsilon")?,
        "rope_theta": meta.get("llama.rope.freq_base").and_then(Value::as_f64).unwrap_or(10000.0),
        "max_position_embeddings": num(meta, "llama.context_length")? as u64,
        "tie_word_embeddings": tied,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id").and_then(Value::as_u64),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id").and_then(Value::as_u64),
    }))
}

pub fn run(gguf: &Path, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let weights = dir.join("model.safetensors");
    let meta_path = dir.join("gguf-metadata.json.tmp");
    ffi::convert_gguf(gguf, &weights, &meta_path)?;
    let meta: Value =
        serde_json::from_slice(&std::fs::read(&meta_path).map_err(|e| e.to_string())?)
            .map_err(|e| format!("GGUF metadata JSON: {e}"))?;
    let _ = std::fs::remove_file(&meta_path);
    let meta = meta.as_object().ok_or("GGUF metadata is not an object")?;
    let tied = !crate::checkpoint::tensor_names(&weights)?
        .iter()
        .any(|n| n == "lm_head.weight");
    let write = |name: &str, v: &Value| {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    write("config.json", &config_json(meta, tied)?)?;
    write("tokenizer.json", &tokenizer_json(meta)?)?;
    if let Some(t) = meta.get("tokenizer.chat_template") {
        write("tokenizer_config.json", &json!({"chat_template": t}))?;
    }
    Ok(())
}
