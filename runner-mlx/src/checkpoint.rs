//! An MLX checkpoint directory as the runner reads it: `config.json` (the architecture and its
//! shape), `tokenizer.json`, and the weights as any number of `*.safetensors` files anywhere
//! under the directory (herd's store links each tensor layer blob in as `tensors/NNNNN.
//! safetensors`; one file may hold one tensor or a packed weight+scales+biases group). The
//! files merge by tensor name. Only what this slice can run is accepted; anything else (a
//! header or offsets past the file's end, a tensor in two files, shapes that disagree with
//! config.json, an unknown architecture, no tokenizer) is a load error naming the problem.
//!
//! Architectures: llama, qwen3 and gemma3 text (`gemma3_text`; HF's Gemma3TextConfig defaults
//! for what its config.json leaves out). A `gemma3` (text + vision) config is refused: its
//! weights live under a language-model prefix beside a vision tower this slice does not run.

use crate::ffi::Shape;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Checkpoint {
    pub shape: Shape,
    /// Every weight file; together they hold each tensor once.
    pub files: Vec<PathBuf>,
    pub tokenizer: PathBuf,
    pub n_ctx_train: u32,
    /// config.json's eos_token_id (one or a list).
    pub eos: Vec<i32>,
    /// The format of every quantized weight (quant.rs), in name order.
    pub quants: Vec<quant::Format>,
}

mod gemma;
pub mod quant;

/// A positive number at `k`, `default` when absent or null.
fn positive(c: &Value, k: &str, default: f64) -> Result<f64, String> {
    match c.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|&v| v > 0.0 && v.is_finite())
            .ok_or_else(|| format!("config.json: `{k}` must be a positive number")),
    }
}

fn int(c: &Value, k: &str) -> Result<i32, String> {
    c.get(k)
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("config.json: `{k}` must be a positive integer"))
}

/// One tensor of a safetensors header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
}

/// Bytes per element of a safetensors dtype (None: a dtype runner-mlx cannot read).
fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" => 1,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "F32" | "I32" | "U32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// The tensors of a safetensors file (8-byte little-endian header length, JSON header, data),
/// each checked against the file: a known dtype, data offsets inside the data section and a
/// byte length equal to its shape's.
pub fn header(path: &Path) -> Result<Vec<TensorInfo>, String> {
    Ok(header_and_metadata(path)?.0)
}

/// [`header`] and the file's `__metadata__` strings (a non-string value is skipped).
pub fn header_and_metadata(
    path: &Path,
) -> Result<(Vec<TensorInfo>, BTreeMap<String, String>), String> {
    use std::io::Read;
    let at = |e: String| format!("{}: {e}", path.display());
    let mut f = std::fs::File::open(path).map_err(|e| at(e.to_string()))?;
    let file_len = f.metadata().map_err(|e| at(e.to_string()))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| at("too short for a safetensors file".into()))?;
    let n = u64::from_le_bytes(n);
    if n > file_len.saturating_sub(8) || n > 100 << 20 {
        return Err(at("the safetensors header is longer than the file".into()));
    }
    let mut h = vec![0u8; n as usize];
    f.read_exact(&mut h).map_err(|e| at(e.to_string()))?;
    let v: Value = serde_json::from_slice(&h).map_err(|e| at(format!("header: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| at("the safetensors header is not an object".into()))?;
    let data_len = file_len - 8 - n;
    let metadata = obj
        .get("__metadata__")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for (name, t) in obj.iter().filter(|(k, _)| *k != "__metadata__") {
        let bad = |what: &str| at(format!("tensor {name}: {what}"));
        let dtype = t["dtype"].as_str().ok_or_else(|| bad("no dtype"))?;
        let size = dtype_size(dtype).ok_or_else(|| bad(&format!("unsupported dtype {dtype}")))?;
        let shape: Vec<u64> = t["shape"]
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect())
            .ok_or_else(|| bad("no shape"))?;
        let offs: Vec<u64> = t["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad("no data_offsets"))?;
        if offs[1] > data_len || offs[0] > offs[1] {
            return Err(bad("its data offsets are past the end of the file"));
        }
        let want = shape
            .iter()
            .try_fold(size, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("its shape overflows"))?;
        if offs[1] - offs[0] != want {
            return Err(bad("its byte length disagrees with its shape and dtype"));
        }
        out.push(TensorInfo {
            name: name.clone(),
            dtype: dtype.to_string(),
            shape,
        });
    }
    Ok((out, metadata))
}

/// The tensor names in a safetensors file.
pub fn tensor_names(path: &Path) -> Result<Vec<String>, String> {
    Ok(header(path)?.into_iter().map(|t| t.name).collect())
}

/// Every `*.safetensors` file under `dir` (any depth, links followed), in path order.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in rd {
            let p = e.map_err(|e| e.to_string())?.path();
            let meta = std::fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            if meta.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The checkpoint's tensors by name, over all its weight files (a name in two files is an
/// error), each with the index of its file in the returned metadata list.
type Tensors = HashMap<String, (TensorInfo, usize)>;

fn tensors(files: &[PathBuf]) -> Result<(Tensors, Vec<BTreeMap<String, String>>), String> {
    let mut all: Tensors = HashMap::new();
    let mut metas = Vec::new();
    for f in files {
        let (ts, meta) = header_and_metadata(f)?;
        metas.push(meta);
        for t in ts {
            if all.contains_key(&t.name) {
                return Err(format!(
                    "tensor {} appears in more than one weight file (again in {})",
                    t.name,
                    f.display()
                ));
            }
            all.insert(t.name.clone(), (t, metas.len() - 1));
        }
    }
    Ok((all, metas))
}

/// A tensor's name as MLX (and the shim) calls it: Ollama's blob companions `X.weight.scale`,
/// `X.weight.bias` and `X.weight.global_scale` are `X.scales`, `X.biases`, `X.global_scale`.
pub fn mlx_name(name: &str) -> String {
    for (ollama, mlx) in [
        (".weight.scale", ".scales"),
        (".weight.bias", ".biases"),
        (".weight.global_scale", ".global_scale"),
    ] {
        if let Some(base) = name.strip_suffix(ollama).filter(|b| !b.is_empty()) {
            return format!("{base}{mlx}");
        }
    }
    name.to_owned()
}

/// The format of every quantized weight (a `X.weight` with `X.scales`), in name order.
fn quant_formats(
    t: &Tensors,
    metas: &[BTreeMap<String, String>],
    config: &Value,
) -> Result<Vec<quant::Format>, String> {
    let by_mlx: HashMap<String, &(TensorInfo, usize)> =
        t.iter().map(|(k, v)| (mlx_name(k), v)).collect();
    let mut prefixes: Vec<&str> = by_mlx
        .keys()
        .filter_map(|k| k.strip_suffix(".scales"))
        .collect();
    prefixes.sort();
    let mut out = Vec::new();
    for prefix in prefixes {
        let get = |suffix: &str| by_mlx.get(&format!("{prefix}{suffix}")).copied();
        let (weight, file) = get(".weight")
            .ok_or_else(|| format!("tensor {prefix}.scales has no {prefix}.weight"))?;
        let parts = quant::Parts {
            weight,
            scales: &get(".scales").expect("listed").0,
            biases: get(".biases").map(|(t, _)| t),
            global: get(".global_scale").map(|(t, _)| t),
            metadata: &metas[*file],
        };
        out.push(quant::resolve(prefix, &parts, config)?);
    }
    Ok(out)
}

/// The shapes config.json fixes before the loader sees a single weight: the embedding's rows
/// (vocab_size) and each norm's width (hidden_size), for every layer it names.
fn check_shapes(t: &Tensors, s: &Shape) -> Result<(), String> {
    let want = |name: &str, dims: &[Option<u64>]| -> Result<(), String> {
        let (t, _) = t
            .get(name)
            .ok_or_else(|| format!("the weights lack tensor {name}"))?;
        let ok = t.shape.len() == dims.len()
            && t.shape
                .iter()
                .zip(dims)
                .all(|(&d, w)| w.is_none_or(|w| w == d));
        if ok {
            return Ok(());
        }
        let dims: Vec<String> = dims
            .iter()
            .map(|d| d.map_or("_".into(), |d| d.to_string()))
            .collect();
        Err(format!(
            "tensor {name} has shape {:?} but config.json implies [{}]",
            t.shape,
            dims.join(", ")
        ))
    };
    let (v, e, d) = (
        Some(s.n_vocab as u64),
        Some(s.n_embd as u64),
        Some(s.head_dim as u64),
    );
    want("model.embed_tokens.weight", &[v, None])?;
    want("model.norm.weight", &[e])?;
    for i in 0..s.n_layer {
        let p = format!("model.layers.{i}");
        want(&format!("{p}.input_layernorm.weight"), &[e])?;
        want(&format!("{p}.post_attention_layernorm.weight"), &[e])?;
        if s.gemma != 0 {
            want(&format!("{p}.pre_feedforward_layernorm.weight"), &[e])?;
            want(&format!("{p}.post_feedforward_layernorm.weight"), &[e])?;
        }
        if s.qk_norm != 0 {
            want(&format!("{p}.self_attn.q_norm.weight"), &[d])?;
            want(&format!("{p}.self_attn.k_norm.weight"), &[d])?;
        }
    }
    Ok(())
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Checkpoint, String> {
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path)
            .map_err(|e| format!("{}: {e}", cfg_path.display()))?;
        let c: Value = serde_json::from_str(&text).map_err(|e| format!("config.json: {e}"))?;
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        if model_type == "gemma3" {
            return Err("config.json: model_type \"gemma3\" (text and vision) is not supported by runner-mlx yet; a text-only gemma3_text checkpoint is".into());
        }
        if !["llama", "qwen3", "gemma3_text"].contains(&model_type) {
            return Err(format!(
                "config.json: model_type {model_type:?} is not supported by runner-mlx yet (llama, qwen3, gemma3_text)"
            ));
        }
        let gemma = model_type == "gemma3_text";
        if c.get("attention_bias").and_then(Value::as_bool) == Some(true) {
            return Err("config.json: attention_bias is not supported by runner-mlx yet".into());
        }
        if !gemma && c.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err("config.json: rope_scaling is not supported by runner-mlx yet".into());
        }
        let n_embd = int(&c, "hidden_size")?;
        let n_head = int(&c, "num_attention_heads")?;
        let head_dim = match c.get("head_dim") {
            Some(_) => int(&c, "head_dim")?,
            None => n_embd / n_head,
        };
        let tokenizer = dir.join("tokenizer.json");
        if !tokenizer.is_file() {
            return Err(format!(
                "{} is missing: the model has no tokenizer",
                tokenizer.display()
            ));
        }
        let files = weight_files(dir)?;
        if files.is_empty() {
            return Err(format!("{} holds no *.safetensors weights", dir.display()));
        }
        let (tensors, metas) = tensors(&files)?;
        let quants = quant_formats(&tensors, &metas, &c)?;
        let tied_cfg = c.get("tie_word_embeddings").and_then(Value::as_bool);
        let has_head = tensors.contains_key("lm_head.weight");
        if tied_cfg == Some(has_head) {
            return Err(format!(
                "config.json: tie_word_embeddings is {} but the weights {} lm_head",
                !has_head,
                if has_head { "have" } else { "lack" }
            ));
        }
        let n_layer = int(&c, "num_hidden_layers")?;
        let g = if gemma {
            gemma::fields(&c, n_layer)?
        } else {
            gemma::Fields::default()
        };
        let shape = Shape {
            n_layer,
            n_embd,
            n_ff: int(&c, "intermediate_size")?,
            n_head,
            n_head_kv: match c.get("num_key_value_heads") {
                Some(_) => int(&c, "num_key_value_heads")?,
                None => n_head,
            },
            head_dim,
            n_vocab: int(&c, "vocab_size")?,
            rope_theta: positive(&c, "rope_theta", if gemma { 1e6 } else { 10000.0 })? as f32,
            norm_eps: c
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6) as f32,
            rope_traditional: 0,
            tied_embeddings: i32::from(!has_head),
            qk_norm: i32::from(model_type == "qwen3" || gemma),
            gemma: i32::from(gemma),
            attn_scale: g.attn_scale,
            sliding_window: g.sliding_window,
            global_every: g.global_every,
            rope_local_theta: g.rope_local_theta,
            rope_scale: g.rope_scale,
            attn_softcap: g.attn_softcap,
            final_softcap: g.final_softcap,
        };
        check_shapes(&tensors, &shape)?;
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
            files,
            tokenizer,
            n_ctx_train: c
                .get("max_position_embeddings")
                .and_then(Value::as_u64)
                .unwrap_or(0) as u32,
            eos,
            quants,
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

    /// A safetensors file of zero-filled F32 tensors.
    fn safetensors(tensors: &[(&str, &[u64])]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        let mut off = 0u64;
        for (name, shape) in tensors {
            let n = 4 * shape.iter().product::<u64>();
            header.insert(
                name.to_string(),
                json!({"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}),
            );
            off += n;
        }
        let h = Value::Object(header).to_string().into_bytes();
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.resize(out.len() + off as usize, 0);
        out
    }

    /// The tensors the config checks look at, for `llama()`.
    fn base() -> Vec<(&'static str, &'static [u64])> {
        vec![
            ("model.embed_tokens.weight", &[100, 64]),
            ("model.norm.weight", &[64]),
            ("model.layers.0.input_layernorm.weight", &[64]),
            ("model.layers.1.input_layernorm.weight", &[64]),
            ("model.layers.0.post_attention_layernorm.weight", &[64]),
            ("model.layers.1.post_attention_layernorm.weight", &[64]),
        ]
    }

    fn llama() -> Value {
        json!({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 100, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": true, "eos_token_id": [7, 8], "max_position_embeddings": 2048})
    }

    #[test]
    fn a_llama_config_gives_its_shape_from_weights_in_any_files() {
        let all = base();
        let d = dir_with(&llama(), &safetensors(&all[..2]));
        // The store's layout: more files under tensors/, each with some of the tensors.
        std::fs::create_dir(d.path().join("tensors")).unwrap();
        for (i, t) in all[2..].iter().enumerate() {
            let p = d.path().join(format!("tensors/{i:05}.safetensors"));
            std::fs::write(p, safetensors(&[*t])).unwrap();
        }
        let c = Checkpoint::open(d.path()).unwrap();
        assert_eq!(c.files.len(), 1 + all.len() - 2);
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
        // The same tensor in a second file is refused.
        std::fs::write(
            d.path().join("tensors/dup.safetensors"),
            safetensors(&all[3..]),
        )
        .unwrap();
        let e = Checkpoint::open(d.path()).unwrap_err();
        assert!(e.contains("more than one weight file"), "{e}");
    }

    #[test]
    fn unsupported_or_inconsistent_checkpoints_are_refused() {
        let plain = safetensors(&base());
        let mut with_head = base();
        with_head.push(("lm_head.weight", &[100, 64]));
        let head = safetensors(&with_head);
        let mut long = plain.clone();
        long[..8].copy_from_slice(&(1u64 << 30).to_le_bytes());
        let mut past = plain.clone();
        past.truncate(past.len() - 4);
        let mut narrow = base();
        narrow[1] = ("model.norm.weight", &[32]);
        let narrow = safetensors(&narrow);
        let mut lacking = base();
        lacking.pop();
        let lacking = safetensors(&lacking);
        let mut other = llama();
        other["model_type"] = json!("mamba");
        let mut scaled = llama();
        scaled["rope_scaling"] = json!({"type": "llama3"});
        let mut heads = llama();
        heads["num_key_value_heads"] = json!(3);
        let mut zero = llama();
        zero["hidden_size"] = json!(0);
        let mut vocab = llama();
        vocab["vocab_size"] = json!(99);
        let mut gemma = llama();
        gemma["model_type"] = json!("gemma3_text");
        let mut multimodal = llama();
        multimodal["model_type"] = json!("gemma3");
        let cases: Vec<(Value, Vec<u8>, &str)> = vec![
            (other, plain.clone(), "model_type \"mamba\""),
            (multimodal, plain.clone(), "text and vision"),
            (
                gemma,
                plain.clone(),
                "lack tensor model.layers.0.pre_feedforward_layernorm",
            ),
            (scaled, plain.clone(), "rope_scaling"),
            (heads, plain.clone(), "multiple"),
            (zero, plain.clone(), "hidden_size"),
            (llama(), head, "tie_word_embeddings"),
            (llama(), long, "header is longer than the file"),
            (llama(), past, "past the end of the file"),
            (llama(), narrow, "model.norm.weight has shape [32]"),
            (
                llama(),
                lacking,
                "lack tensor model.layers.1.post_attention_layernorm",
            ),
            (
                vocab,
                plain.clone(),
                "embed_tokens.weight has shape [100, 64]",
            ),
            (llama(), Vec::new(), "too short"),
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
            .contains("no tokenizer"));
        std::fs::write(d.path().join("tokenizer.json"), "{}").unwrap();
        std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
        assert!(Checkpoint::open(d.path())
            .unwrap_err()
            .contains("no *.safetensors"));
    }
}
