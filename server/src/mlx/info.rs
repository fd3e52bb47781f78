//! What a safetensors (MLX) model's `config.json` and tensor headers say, in Ollama's terms
//! (`x/server/show.go`): the architecture name, `model_info`, the parameter count from tensor
//! shapes (quantized U32 words unpacked), the quantization level, and each quantized weight's
//! type (`int4`/`int8` affine, `nvfp4`/`mxfp4`/`mxfp8`), bits and group size. Pure functions over parsed JSON and headers, table-tested.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use super::header::{Entry, Header};

/// The architectures this slice's runner serves (HF `model_type` values). Not `gemma3`, the
/// text + vision wrapper (its language model sits under a prefix beside a vision tower).
pub const SUPPORTED: &[&str] = &["llama", "qwen3", "gemma3_text"];

/// Ollama's architecture name: `model_type`, else `architectures[0]` lower-cased without
/// `ForCausalLM` / `ForConditionalGeneration`.
pub fn arch(config: &Json) -> String {
    if let Some(t) = config["model_type"].as_str().filter(|t| !t.is_empty()) {
        return t.to_owned();
    }
    let hf = config["architectures"][0]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    hf.trim_end_matches("forcausallm")
        .trim_end_matches("forconditionalgeneration")
        .to_owned()
}

/// A config field, from `text_config` first when the model nests one (multimodal configs).
pub fn dim(config: &Json, key: &str) -> Option<u64> {
    config["text_config"][key]
        .as_u64()
        .filter(|&v| v > 0)
        .or_else(|| config[key].as_u64().filter(|&v| v > 0))
}

/// Ollama's `model_info` for a safetensors LLM (`buildModelInfo`), with the exact parameter
/// count from the tensor headers.
pub fn model_info(config: &Json, parameter_count: u64) -> Map<String, Json> {
    let a = arch(config);
    let mut m = Map::new();
    m.insert("general.architecture".into(), Json::String(a.clone()));
    let keys = [
        ("max_position_embeddings", "context_length"),
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
        ("num_attention_heads", "attention.head_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("intermediate_size", "feed_forward_length"),
        ("vocab_size", "vocab_size"),
    ];
    for (hf, ours) in keys {
        // Ollama takes only these three from text_config; the rest from the top level.
        let v = if matches!(
            hf,
            "max_position_embeddings" | "hidden_size" | "num_hidden_layers"
        ) {
            dim(config, hf)
        } else {
            config[hf].as_u64().filter(|&v| v > 0)
        };
        if let Some(v) = v {
            m.insert(format!("{a}.{ours}"), Json::from(v));
        }
    }
    if parameter_count > 0 {
        m.insert(
            "general.parameter_count".into(),
            Json::from(parameter_count),
        );
    }
    m
}

/// Ollama's companion tensors of a quantized weight (skipped when counting; its rule, which also
/// skips a real `.bias`).
pub fn is_companion(name: &str) -> bool {
    name.ends_with(".scale")
        || name.ends_with(".bias")
        || name.ends_with(".global_scale")
        || name.ends_with(".scales")
        || name.ends_with(".biases")
}

/// Bits of an Ollama quant type (`int4` → 4).
pub fn quant_bits(q: &str) -> Option<u64> {
    match q.to_ascii_lowercase().as_str() {
        "int4" | "nvfp4" | "mxfp4" => Some(4),
        "int8" | "mxfp8" => Some(8),
        _ => None,
    }
}

/// One tensor blob's main tensors: (name, quant type if quantized, logical shape).
pub fn blob_tensors(layer_name: &str, h: &Header) -> Vec<(String, String, Vec<u64>)> {
    let mains: Vec<&Entry> = h
        .tensors
        .iter()
        .filter(|t| !is_companion(&t.name))
        .collect();
    let packed = mains.len() > 1;
    let mut out = Vec::new();
    for t in mains {
        let name = if packed {
            t.name.clone()
        } else {
            layer_name.to_owned()
        };
        let q = h
            .metadata
            .get(&format!("{}.quant_type", t.name))
            .or_else(|| h.metadata.get("quant_type"))
            .cloned()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut shape = t.shape.clone();
        match quant_bits(&q) {
            Some(bits) if shape.len() >= 2 && t.dtype == "U32" => {
                *shape.last_mut().unwrap() *= 32 / bits;
                out.push((name, q, shape));
            }
            _ => out.push((name, t.dtype.clone(), shape)),
        }
    }
    out
}

/// Parameter count and quantization level over every tensor blob: the lowest-precision quant
/// type present, else `None` (the caller falls back to `torch_dtype`).
pub fn summarize(blobs: &[(String, Header)]) -> (u64, Option<String>) {
    let mut total = 0u64;
    let mut best: Option<(u64, String)> = None;
    for (name, h) in blobs {
        for (_, ty, shape) in blob_tensors(name, h) {
            total = total.saturating_add(shape.iter().product());
            if let Some(bits) = quant_bits(&ty) {
                if best.as_ref().is_none_or(|(b, _)| bits < *b) {
                    best = Some((bits, ty));
                }
            }
        }
    }
    (total, best.map(|(_, t)| t))
}

/// MLX's quantization mode of an Ollama quant type (`int4` → `affine`), and its default group
/// size (x/quant's table).
pub fn quant_mode(q: &str) -> Option<(&'static str, u64)> {
    Some(match q.to_ascii_lowercase().as_str() {
        "int4" | "int8" => ("affine", 64),
        "nvfp4" => ("nvfp4", 16),
        "mxfp4" => ("mxfp4", 32),
        "mxfp8" => ("mxfp8", 32),
        _ => return None,
    })
}

/// The Ollama quant type of MLX's `mode` at `bits` (`affine` at 4 → `int4`), if one exists;
/// the fp modes' bits are fixed (nvfp4/mxfp4 4, mxfp8 8).
fn quant_type(mode: &str, bits: u64) -> Option<String> {
    let t = match mode.to_ascii_lowercase().as_str() {
        "affine" => format!("int{bits}"),
        m @ ("nvfp4" | "mxfp4") if bits == 4 => m.to_owned(),
        "mxfp8" if bits == 8 => "mxfp8".to_owned(),
        _ => return None,
    };
    Some(t)
}

/// Ollama's quant type, bits and group size of the MLX-quantized `weight` (U32 words) with
/// `scales`: the checkpoint's `quantization` config (per-module override, else global; mlx-lm's
/// `mode`, absent for affine) when it has one; else, for float scales (affine: the fp modes'
/// scales are U8 and cannot be told apart by shape), the one (bits, group) that makes the
/// logical input width one of the model's widths. The result is checked against the shapes:
/// one scale column per group of the unpacked width.
pub fn quant_params(
    config: &Json,
    module: &str,
    weight: &Entry,
    scales: &Entry,
) -> Option<(String, u64, u64)> {
    let q = if config["quantization"].is_object() {
        &config["quantization"]
    } else {
        &config["quantization_config"]
    };
    let pick = |o: &Json| {
        let (bits, group) = (o["bits"].as_u64()?, o["group_size"].as_u64()?);
        Some((
            quant_type(o["mode"].as_str().unwrap_or("affine"), bits)?,
            bits,
            group,
        ))
    };
    let packed = *weight.shape.last()?;
    let groups = *scales.shape.last()?;
    let declared = if q[module].is_object() {
        pick(&q[module])
    } else {
        pick(q)
    };
    let fits = |bits: u64, group: u64| {
        bits > 0 && group > 0 && (packed * 32) % bits == 0 && packed * 32 / bits == groups * group
    };
    if let Some((t, bits, group)) = declared {
        let fp = quant_mode(&t).is_some_and(|(m, _)| m != "affine");
        return (fits(bits, group) && fp == (scales.dtype == "U8")).then_some((t, bits, group));
    }
    if scales.dtype == "U8" {
        return None;
    }
    let head_dim = config["head_dim"]
        .as_u64()
        .or_else(|| Some(dim(config, "hidden_size")? / config["num_attention_heads"].as_u64()?));
    let heads = config["num_attention_heads"].as_u64();
    let widths = [
        dim(config, "hidden_size"),
        dim(config, "intermediate_size"),
        heads.zip(head_dim).map(|(h, d)| h * d),
    ];
    for width in widths.into_iter().flatten() {
        if width == 0 || groups == 0 || (packed * 32) % width != 0 || width % groups != 0 {
            continue;
        }
        let bits = packed * 32 / width;
        let group = width / groups;
        if [2, 3, 4, 5, 6, 8].contains(&bits) && [32, 64, 128].contains(&group) {
            return Some((format!("int{bits}"), bits, group));
        }
    }
    None
}

/// Blob metadata Ollama writes for a quantized weight of type `ty` (`int4`, `nvfp4`, ...).
pub fn quant_metadata(ty: &str, group: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("quant_type".to_owned(), ty.to_owned()),
        ("group_size".to_owned(), group.to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(name: &str, dtype: &str, shape: &[u64]) -> Entry {
        Entry {
            name: name.into(),
            dtype: dtype.into(),
            shape: shape.to_vec(),
            start: 0,
            len: 0,
        }
    }

    #[test]
    fn arch_names_follow_ollama() {
        let cases = [
            (
                json!({"model_type": "llama", "architectures": ["X"]}),
                "llama",
            ),
            (json!({"architectures": ["Gemma3ForCausalLM"]}), "gemma3"),
            (
                json!({"architectures": ["Qwen3ForConditionalGeneration"]}),
                "qwen3",
            ),
            (json!({}), ""),
        ];
        for (c, want) in cases {
            assert_eq!(arch(&c), want, "{c}");
        }
    }

    #[test]
    fn model_info_keys() {
        let c = json!({"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
            "max_position_embeddings": 8192, "num_attention_heads": 9, "num_key_value_heads": 3,
            "intermediate_size": 1536, "vocab_size": 49152});
        let m = model_info(&c, 134_515_008);
        assert_eq!(m["general.architecture"], "llama");
        assert_eq!(m["llama.context_length"], 8192);
        assert_eq!(m["llama.embedding_length"], 576);
        assert_eq!(m["llama.block_count"], 30);
        assert_eq!(m["llama.attention.head_count_kv"], 3);
        assert_eq!(m["llama.feed_forward_length"], 1536);
        assert_eq!(m["llama.vocab_size"], 49152);
        assert_eq!(m["general.parameter_count"], 134_515_008u64);
        assert_eq!(m.len(), 9);
    }

    #[test]
    fn quant_params_from_config_or_shapes() {
        let smol = json!({"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "head_dim": 64});
        // (packed cols, scale cols) → (bits, group): SmolLM2's 8-bit g32 embedding, 4-bit g32
        // projections, a down_proj (input 1536), and an impossible layout.
        let cases = [
            ((144, 18), Some((8, 32))),
            ((72, 18), Some((4, 32))),
            ((192, 48), Some((4, 32))),
            ((36, 9), Some((2, 64))),
            ((7, 3), None),
        ];
        for ((p, g), want) in cases {
            let got = quant_params(
                &smol,
                "m",
                &e("w", "U32", &[10, p]),
                &e("s", "F16", &[10, g]),
            );
            let want = want.map(|(b, g)| (format!("int{b}"), b, g));
            assert_eq!(got, want, "{p} {g}");
        }
        let cfg = json!({"quantization": {"bits": 4, "group_size": 64, "m.embed": {"bits": 8, "group_size": 64}}});
        let (w8, w4, s) = (
            e("w", "U32", &[1, 16]),
            e("w", "U32", &[1, 8]),
            e("s", "F16", &[1, 1]),
        );
        assert_eq!(
            quant_params(&cfg, "m.embed", &w8, &s),
            Some(("int8".into(), 8, 64))
        );
        assert_eq!(
            quant_params(&cfg, "m.q", &w4, &s),
            Some(("int4".into(), 4, 64))
        );
        // ... checked against the shapes.
        assert_eq!(quant_params(&cfg, "m.q", &w8, &s), None);
        // The fp modes: declared by mlx-lm's `mode`, U8 scales; never guessed from shapes.
        let fp = json!({"quantization": {"bits": 4, "group_size": 16, "mode": "nvfp4",
            "lm_head": {"bits": 8, "group_size": 32, "mode": "mxfp8"}}});
        let u8s = |cols| e("s", "U8", &[1, cols]);
        assert_eq!(
            quant_params(&fp, "m.q", &w4, &u8s(4)),
            Some(("nvfp4".into(), 4, 16))
        );
        assert_eq!(
            quant_params(&fp, "lm_head", &w8, &u8s(2)),
            Some(("mxfp8".into(), 8, 32))
        );
        assert_eq!(quant_params(&fp, "m.q", &w4, &u8s(2)), None);
        assert_eq!(quant_params(&fp, "m.q", &w4, &e("s", "F16", &[1, 4])), None);
        assert_eq!(
            quant_params(&smol, "m", &e("w", "U32", &[10, 72]), &u8s(18)),
            None
        );
        let odd = json!({"quantization": {"bits": 8, "group_size": 32, "mode": "mxfp4"}});
        assert_eq!(quant_params(&odd, "m.q", &w8, &u8s(2)), None);
    }

    #[test]
    fn summaries_unpack_quantized_words() {
        let q = Header {
            tensors: vec![
                e("a.weight", "U32", &[8, 4]),
                e("a.weight.scale", "F16", &[8, 1]),
                e("a.weight.bias", "F16", &[8, 1]),
            ],
            metadata: quant_metadata("int4", 32),
        };
        let f = Header {
            tensors: vec![e("n.weight", "BF16", &[8])],
            metadata: BTreeMap::new(),
        };
        let t = blob_tensors("a.weight", &q);
        assert_eq!(
            t,
            vec![("a.weight".to_owned(), "int4".to_owned(), vec![8, 32])]
        );
        let (n, level) = summarize(&[("a.weight".into(), q), ("n.weight".into(), f.clone())]);
        assert_eq!((n, level.as_deref()), (8 * 32 + 8, Some("int4")));
        assert_eq!(summarize(&[("n.weight".into(), f)]), (8, None));
    }
}
