//! An MLX checkpoint directory as the runner reads it: `config.json` (the architecture and its
//! shape), `model.safetensors` and `tokenizer.json`. Only what this slice can run is accepted;
//! anything else is a load error naming what is unsupported.

use crate::ffi::Shape;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Checkpoint {
    pub shape: Shape,
    pub weights: PathBuf,
    pub tokenizer: PathBuf,
    pub n_ctx_train: u32,
    /// config.json's eos_token_id (one or a list).
    pub eos: Vec<i32>,
}

fn int(c: &Value, k: &str) -> Result<i32, String> {
    c.get(k)
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("config.json: `{k}` must be a positive integer"))
}

/// The tensor names in a safetensors file's header (8-byte little-endian length, then JSON).
pub fn tensor_names(path: &Path) -> Result<Vec<String>, String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file_len = f.metadata().map_err(|e| e.to_string())?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let n = u64::from_le_bytes(n);
    if n > file_len.saturating_sub(8) || n > 100 << 20 {
        return Err(format!(
            "{}: the safetensors header is longer than the file",
            path.display()
        ));
    }
    let mut h = vec![0u8; n as usize];
    f.read_exact(&mut h).map_err(|e| e.to_string())?;
    let v: Value =
        serde_json::from_slice(&h).map_err(|e| format!("{}: header: {e}", path.display()))?;
    let obj = v.as_object().ok_or("safetensors header is not an object")?;
    Ok(obj
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect())
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Checkpoint, String> {
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path)
            .map_err(|e| format!("{}: {e}", cfg_path.display()))?;
        let c: Value = serde_json::from_str(&text).map_err(|e| format!("config.json: {e}"))?;
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        if model_type != "llama" {
            return Err(format!(
                "config.json: model_type {model_type:?} is not supported by runner-mlx yet (llama only)"
            ));
        }
        if c.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err("config.json: rope_scaling is not supported by runner-mlx yet".into());
        }
        let n_embd = int(&c, "hidden_size")?;
        let n_head = int(&c, "num_attention_heads")?;
        let head_dim = match c.get("head_dim") {
            Some(_) => int(&c, "head_dim")?,
            None => n_embd / n_head,
        };
        let weights = dir.join("model.safetensors");
        let tokenizer = dir.join("tokenizer.json");
        for p in [&weights, &tokenizer] {
            if !p.is_file() {
                return Err(format!("{} is missing", p.display()));
            }
        }
        let tied_cfg = c.get("tie_word_embeddings").and_then(Value::as_bool);
        let has_head = tensor_names(&weights)?
            .iter()
            .any(|n| n == "lm_head.weight");
        if tied_cfg == Some(has_head) {
            return Err(format!(
                "config.json: tie_word_embeddings is {} but the weights {} lm_head",
                !has_head,
                if has_head { "have" } else { "lack" }
            ));
        }
        let shape = Shape {
            n_layer: int(&c, "num_hidden_layers")?,
            n_embd,
            n_ff: int(&c, "intermediate_size")?,
            n_head,
            n_head_kv: match c.get("num_key_value_heads") {
                Some(_) => int(&c, "num_key_value_heads")?,
                None => n_head,
            },
            head_dim,
            n_vocab: int(&c, "vocab_size")?,
            rope_theta: c
                .get("rope_theta")
                .and_then(Value::as_f64)
                .unwrap_or(10000.0) as f32,
            norm_eps: c
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6) as f32,
            rope_traditional: 0,
            tied_embeddings: i32::from(!has_head),
        };
        if shape.n_head % shape.n_head_kv != 0 {
            return Err(
                "config.json: num_attention_heads is not a multiple of num_key_value_heads".into(),
            );
        }
        let eos = match c.get("eos_token_id") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_i64)
                .map(|v| v as i32)
                .collect(),
            Some(v) => v.as_i64().map(|v| vec![v as i32]).unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(Checkpoint {
            shape,
            weights,
            tokenizer,
            n_ctx_train: c
                .get("max_position_embeddings")
                .and_then(Value::as_u64)
                .unwrap_or(0) as u32,
            eos,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir_with(config: &Value, weights: &[u8]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), config.to_string()).unwrap();
        std::fs::write(d.path().join("model.safetensors"), weights).unwrap();
        std::fs::write(d.path().join("tokenizer.json"), "{}").unwrap();
        d
    }

    fn safetensors(header: &Value) -> Vec<u8> {
        let h = header.to_string().into_bytes();
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out
    }

    fn llama() -> Value {
        json!({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 100, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": true, "eos_token_id": [7, 8], "max_position_embeddings": 2048})
    }

    #[test]
    fn a_llama_config_gives_its_shape() {
        let d = dir_with(&llama(), &safetensors(&json!({"model.norm.weight": {}})));
        let c = Checkpoint::open(d.path()).unwrap();
        assert_eq!(
            (
                c.shape.n_embd,
                c.shape.n_head,
                c.shape.n_head_kv,
                c.shape.head_dim
            ),
            (64, 4, 2, 16)
        );
        assert_eq!(
            (c.shape.tied_embeddings, c.eos.clone(), c.n_ctx_train),
            (1, vec![7, 8], 2048)
        );
        assert_eq!(c.shape.rope_theta, 500000.0);
    }

    #[test]
    fn unsupported_or_inconsistent_checkpoints_are_refused() {
        let head = safetensors(&json!({"lm_head.weight": {}}));
        let plain = safetensors(&json!({"model.norm.weight": {}}));
        let mut long = plain.clone();
        long[0] = 0xFF;
        let mut qwen = llama();
        qwen["model_type"] = json!("qwen3");
        let mut scaled = llama();
        scaled["rope_scaling"] = json!({"type": "llama3"});
        let mut heads = llama();
        heads["num_key_value_heads"] = json!(3);
        let mut zero = llama();
        zero["hidden_size"] = json!(0);
        let cases: Vec<(Value, Vec<u8>, &str)> = vec![
            (qwen, plain.clone(), "model_type \"qwen3\""),
            (scaled, plain.clone(), "rope_scaling"),
            (heads, plain.clone(), "multiple"),
            (zero, plain.clone(), "hidden_size"),
            (llama(), head, "tie_word_embeddings"),
            (llama(), long, "header is longer than the file"),
        ];
        for (cfg, w, want) in cases {
            let d = dir_with(&cfg, &w);
            let e = Checkpoint::open(d.path()).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
        let d = dir_with(&llama(), &plain);
        std::fs::remove_file(d.path().join("tokenizer.json")).unwrap();
        assert!(Checkpoint::open(d.path())
            .unwrap_err()
            .contains("tokenizer.json is missing"));
    }
}
