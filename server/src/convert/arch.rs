//! Per-architecture facts for conversion: which Hugging Face `architectures[0]` maps to which GGUF
//! architecture, the hyper-parameter keys written from config.json, and the tensor name map. The
//! facts (key names, value types, defaults, the name table) follow the pinned llama.cpp tree's
//! `convert_hf_to_gguf.py` and `gguf-py`, so a herd conversion matches the reference's output.
//!
//! Where config.json omits a value, the reference sees the default of transformers' config class
//! (it loads config.json through `AutoConfig`); `Hparams::get` supplies the defaults the written
//! keys depend on, so both conversions of the same directory agree.

use serde_json::{Map, Value as Json};

use crate::error::{Error, Result};
use crate::gguf::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    /// The GGUF architecture for a Hugging Face architecture class name.
    pub fn from_hf(name: &str) -> Option<Arch> {
        Some(match name {
            "LlamaForCausalLM" | "LLaMAForCausalLM" | "MistralForCausalLM" | "LlamaModel" => {
                Arch::Llama
            }
            "Qwen2ForCausalLM" | "Qwen2Model" => Arch::Qwen2,
            "Qwen3ForCausalLM" => Arch::Qwen3,
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => Arch::Gemma3,
            _ => return None,
        })
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// config.json with `text_config` merged over the root (as the reference does for multimodal
/// wrappers such as Gemma3ForConditionalGeneration).
#[derive(Clone, Debug)]
pub struct Hparams {
    pub arch: Arch,
    pub hf_arch: String,
    map: Map<String, Json>,
    pub block_count: u64,
}

impl Hparams {
    pub fn parse(config: &Json) -> Result<Hparams> {
        let root = config
            .as_object()
            .ok_or_else(|| Error::BadRequest("config.json is not a JSON object".into()))?;
        let text = root.get("text_config").and_then(Json::as_object);
        let first = |m: &Map<String, Json>| {
            m.get("architectures")
                .and_then(Json::as_array)
                .and_then(|a| a.first())
                .and_then(Json::as_str)
                .map(str::to_owned)
        };
        let hf_arch = text
            .and_then(first)
            .or_else(|| first(root))
            .ok_or_else(|| Error::BadRequest("config.json names no architectures".into()))?;
        let arch = Arch::from_hf(&hf_arch).ok_or_else(|| {
            Error::BadRequest(format!(
                "unsupported architecture {hf_arch:?}; herd converts Llama, Mistral, Qwen2, Qwen3 and Gemma3 text models"
            ))
        })?;
        let mut map = root.clone();
        if let Some(text) = text {
            map.extend(text.clone());
        }
        let mut hp = Hparams {
            arch,
            hf_arch,
            map,
            block_count: 0,
        };
        hp.block_count = hp
            .find_u64(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])
            .filter(|&n| n > 0 && n <= crate::gguf::MAX_BLOCK_COUNT)
            .ok_or_else(|| {
                Error::BadRequest(
                    "config.json: num_hidden_layers is missing or out of range".into(),
                )
            })?;
        for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
            if hp.map.get(key).is_some_and(|v| !v.is_null()) {
                return Err(Error::BadRequest(
                    "mixture-of-experts checkpoints are not supported by herd's converter".into(),
                ));
            }
        }
        Ok(hp)
    }

    /// A config value, or the transformers config class default for the keys conversion reads.
    pub fn get(&self, key: &str) -> Option<Json> {
        if let Some(v) = self.map.get(key).filter(|v| !v.is_null()) {
            return Some(v.clone());
        }
        let num = |x: f64| Some(Json::from(x));
        let int = |x: u64| Some(Json::from(x));
        match (self.arch, key) {
            (Arch::Llama, "max_position_embeddings") => int(2048),
            (Arch::Qwen2 | Arch::Qwen3, "max_position_embeddings") => int(32768),
            (Arch::Llama | Arch::Qwen2 | Arch::Qwen3, "rope_theta") => num(10000.0),
            (Arch::Llama | Arch::Qwen2 | Arch::Qwen3, "rms_norm_eps") => num(1e-6),
            (Arch::Llama, "num_key_value_heads") => self.map.get("num_attention_heads").cloned(),
            (Arch::Llama, "head_dim") => {
                let h = self.map.get("hidden_size")?.as_u64()?;
                let n = self.map.get("num_attention_heads")?.as_u64()?;
                (n > 0).then(|| Json::from(h / n))
            }
            (Arch::Qwen3, "head_dim") => int(128),
            (Arch::Qwen2 | Arch::Qwen3, "num_key_value_heads") => int(32),
            (Arch::Llama, "intermediate_size") => int(11008),
            (Arch::Qwen2 | Arch::Qwen3, "intermediate_size") => int(22016),
            (Arch::Gemma3, "intermediate_size") => int(9216),
            (Arch::Gemma3, "rope_local_base_freq") => num(10000.0),
            (Arch::Gemma3, "sliding_window") => int(4096),
            _ => None,
        }
    }

    pub fn find(&self, keys: &[&str]) -> Option<Json> {
        keys.iter().find_map(|k| self.get(k))
    }

    pub fn find_u64(&self, keys: &[&str]) -> Option<u64> {
        self.find(keys).and_then(|v| v.as_u64())
    }

    fn u32_of(&self, key: &str, v: Json) -> Result<u32> {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Error::BadRequest(format!("config.json: {key} must be a small integer")))
    }

    pub fn n_head(&self) -> Result<u64> {
        self.find_u64(&["n_heads", "num_attention_heads"])
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::BadRequest("config.json: num_attention_heads is missing".into()))
    }

    pub fn n_head_kv(&self) -> Result<u64> {
        self.find_u64(&["n_kv_heads", "num_key_value_heads"])
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::BadRequest("config.json: num_key_value_heads is missing".into()))
    }

    /// `rope_scaling` (or `rope_parameters`) when it is set.
    pub fn rope_scaling(&self) -> Option<Map<String, Json>> {
        self.find(&["rope_parameters", "rope_scaling"])
            .and_then(|v| v.as_object().cloned())
    }

    pub fn vocab_size(&self) -> Option<u64> {
        self.find_u64(&["vocab_size_per_layer_input", "vocab_size"])
    }

    /// The `<arch>.*` hyper-parameter keys and `general.file_type`, in the reference's order.
    pub fn kvs(&self, file_type: u32) -> Result<Vec<(String, Value)>> {
        let a = self.arch.gguf_name();
        let mut out: Vec<(String, Value)> = Vec::new();
        let mut put = |k: &str, v: Value| {
            let key = if k.starts_with("general.") {
                k.to_owned()
            } else {
                format!("{a}.{k}")
            };
            // A later write of the same key replaces the value in place (gguf-py's behaviour).
            match out.iter_mut().find(|(name, _)| *name == key) {
                Some(slot) => slot.1 = v,
                None => out.push((key, v)),
            }
        };
        let f32_of = |key: &str, v: Json| -> Result<f32> {
            v.as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| Error::BadRequest(format!("config.json: {key} must be a number")))
        };
        put("block_count", Value::U32(self.block_count as u32));
        let int_keys: [(&str, &[&str]); 5] = [
            (
                "context_length",
                &[
                    "max_position_embeddings",
                    "n_ctx",
                    "n_positions",
                    "max_length",
                    "max_sequence_length",
                    "model_max_length",
                ],
            ),
            ("embedding_length", &["hidden_size", "n_embd", "dim"]),
            (
                "feed_forward_length",
                &[
                    "prefix_dense_intermediate_size",
                    "dense_intermediate_size",
                    "intermediate_size",
                    "n_inner",
                    "hidden_dim",
                ],
            ),
            (
                "attention.head_count",
                &["num_attention_heads", "n_head", "n_heads"],
            ),
            (
                "attention.head_count_kv",
                &["num_key_value_heads", "n_kv_heads"],
            ),
        ];
        for (k, names) in int_keys {
            if let Some(v) = self.find(names) {
                put(k, Value::U32(self.u32_of(names[0], v)?));
            }
        }
        if self.map.get("is_causal") == Some(&Json::Bool(false)) {
            put("attention.causal", Value::Bool(false));
        }
        if let Some(rope) = self.rope_scaling() {
            let ty = rope
                .get("rope_type")
                .or_else(|| rope.get("type"))
                .and_then(Json::as_str)
                .unwrap_or("");
            let factor = rope.get("factor").and_then(Json::as_f64);
            match ty {
                "linear" => {
                    if let Some(f) = factor {
                        put("rope.scaling.type", Value::String("linear".into()));
                        put("rope.scaling.factor", Value::F32(f as f32));
                    }
                }
                "yarn" => {
                    if let Some(f) = factor {
                        put("rope.scaling.type", Value::String("yarn".into()));
                        put("rope.scaling.factor", Value::F32(f as f32));
                        let orig = rope.get("original_max_position_embeddings").cloned().ok_or_else(|| {
                            Error::BadRequest("config.json: yarn rope scaling needs original_max_position_embeddings".into())
                        })?;
                        put(
                            "rope.scaling.original_context_length",
                            Value::U32(self.u32_of("original_max_position_embeddings", orig)?),
                        );
                        let extra = [
                            ("extrapolation_factor", "yarn_ext_factor"),
                            ("attention_factor", "yarn_attn_factor"),
                            ("attn_factor", "yarn_attn_factor"),
                            ("beta_fast", "yarn_beta_fast"),
                            ("beta_slow", "yarn_beta_slow"),
                        ];
                        for (from, to) in extra {
                            let key = format!("rope.scaling.{to}");
                            if let Some(x) = rope.get(from).and_then(Json::as_f64) {
                                // `attention_factor` wins over its older alias `attn_factor`.
                                if from == "attn_factor" && rope.contains_key("attention_factor") {
                                    continue;
                                }
                                put(&key, Value::F32(x as f32));
                            }
                        }
                    }
                }
                // llama3: a rope_freqs tensor (tensors.rs); dynamic: the reference ignores it.
                "llama3" | "dynamic" | "default" | "" => {}
                other => {
                    return Err(Error::BadRequest(format!(
                    "config.json: rope scaling type {other:?} is not supported by herd's converter"
                )))
                }
            }
        }
        let rope_theta = self
            .rope_scaling()
            .and_then(|r| r.get("rope_theta").cloned())
            .or_else(|| {
                self.find(&[
                    "global_rope_theta",
                    "rope_global_theta",
                    "rope_theta_global",
                    "rope_theta",
                    "rotary_emb_base",
                ])
            });
        if let Some(v) = rope_theta {
            put("rope.freq_base", Value::F32(f32_of("rope_theta", v)?));
        }
        if let Some(v) = self.find(&[
            "local_rope_theta",
            "rope_local_theta",
            "rope_theta_local",
            "swa_rope_theta",
            "rope_local_base_freq",
        ]) {
            put(
                "rope.freq_base_swa",
                Value::F32(f32_of("rope_local_base_freq", v)?),
            );
        }
        if let Some(v) = self.find(&["rms_norm_eps", "norm_eps"]) {
            put(
                "attention.layer_norm_rms_epsilon",
                Value::F32(f32_of("rms_norm_eps", v)?),
            );
        }
        if let Some(v) = self.find(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
            put(
                "attention.layer_norm_epsilon",
                Value::F32(f32_of("layer_norm_eps", v)?),
            );
        }
        if let Some(v) = self.get("head_dim") {
            let hd = self.u32_of("head_dim", v)?;
            put("attention.key_length", Value::U32(hd));
            put("attention.value_length", Value::U32(hd));
        }
        put("general.file_type", Value::U32(file_type));
        match self.arch {
            Arch::Llama => {
                let vocab = self.get("vocab_size").ok_or_else(|| {
                    Error::BadRequest("config.json: vocab_size is missing".into())
                })?;
                put("vocab_size", Value::U32(self.u32_of("vocab_size", vocab)?));
                let rope_dim = match self.map.get("head_dim").filter(|v| !v.is_null()) {
                    Some(v) => self.u32_of("head_dim", v.clone())?,
                    None => {
                        let h = self.find_u64(&["hidden_size"]).unwrap_or(0);
                        (h / self.n_head()?) as u32
                    }
                };
                put("rope.dimension_count", Value::U32(rope_dim));
            }
            Arch::Qwen2 | Arch::Qwen3 => {}
            Arch::Gemma3 => {
                let or = |k: &str, d: Json| self.get(k).unwrap_or(d);
                put(
                    "context_length",
                    Value::U32(self.u32_of(
                        "max_position_embeddings",
                        or("max_position_embeddings", 131072.into()),
                    )?),
                );
                put(
                    "attention.head_count",
                    Value::U32(
                        self.u32_of("num_attention_heads", or("num_attention_heads", 8.into()))?,
                    ),
                );
                put(
                    "attention.layer_norm_rms_epsilon",
                    Value::F32(f32_of("rms_norm_eps", or("rms_norm_eps", 1e-6.into()))?),
                );
                let hd = self.u32_of("head_dim", or("head_dim", 256.into()))?;
                put("attention.key_length", Value::U32(hd));
                put("attention.value_length", Value::U32(hd));
                put(
                    "rope.freq_base",
                    Value::F32(f32_of("rope_theta", or("rope_theta", 1_000_000.0.into()))?),
                );
                if let Some(c) = self
                    .get("final_logit_softcapping")
                    .and_then(|v| v.as_f64())
                    .filter(|&c| c != 0.0)
                {
                    put("final_logit_softcapping", Value::F32(c as f32));
                }
                if self.get("sliding_window_pattern") != Some(Json::from(1)) {
                    let sw = self.get("sliding_window").ok_or_else(|| {
                        Error::BadRequest("config.json: sliding_window is missing".into())
                    })?;
                    put(
                        "attention.sliding_window",
                        Value::U32(self.u32_of("sliding_window", sw)?),
                    );
                }
                put(
                    "attention.head_count_kv",
                    Value::U32(
                        self.u32_of("num_key_value_heads", or("num_key_value_heads", 4.into()))?,
                    ),
                );
            }
        }
        Ok(out)
    }
}

/// What a Hugging Face tensor name becomes, or `None` when the reference drops it.
pub fn map_tensor_name(hp: &Hparams, name: &str) -> Result<Option<String>> {
    let unmapped = || Error::BadRequest(format!("cannot map tensor {name:?} for {}", hp.hf_arch));
    if name.ends_with(".rotary_emb.inv_freq")
        || name.ends_with(".attention.masked_bias")
        || name.ends_with(".attention.bias")
        || is_multimodal(name)
    {
        return Ok(None);
    }
    let mut n = name.replace("language_model.", "");
    if hp.arch == Arch::Llama {
        n = n.replace("text_model.", "");
    }
    if matches!(hp.hf_arch.as_str(), "LlamaModel" | "Qwen2Model") {
        n = format!("model.{n}");
    }
    let (stem, suffix) = if let Some(s) = n.strip_suffix(".weight") {
        (s, "weight")
    } else if let Some(s) = n.strip_suffix(".bias") {
        (s, "bias")
    } else {
        return Err(unmapped());
    };
    let global = match stem {
        "model.embed_tokens" => Some("token_embd"),
        "model.norm" => Some("output_norm"),
        "lm_head" => Some("output"),
        _ => None,
    };
    if let Some(g) = global {
        return Ok(Some(format!("{g}.{suffix}")));
    }
    let rest = stem.strip_prefix("model.layers.").ok_or_else(unmapped)?;
    let (bid, part) = rest.split_once('.').ok_or_else(unmapped)?;
    let bid: u64 = bid.parse().map_err(|_| unmapped())?;
    if bid >= hp.block_count {
        return Err(unmapped());
    }
    let gemma = hp.arch == Arch::Gemma3;
    let qk_norm = matches!(hp.arch, Arch::Qwen3 | Arch::Gemma3);
    let out = match part {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" if qk_norm => "attn_q_norm",
        "self_attn.k_norm" if qk_norm => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "post_attention_layernorm" if gemma => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" if gemma => "ffn_norm",
        "post_feedforward_layernorm" if gemma => "post_ffw_norm",
        _ => return Err(unmapped()),
    };
    Ok(Some(format!("blk.{bid}.{out}.{suffix}")))
}

/// The reference's text-model filter: vision, audio and projector tensors of multimodal
/// checkpoints are not part of the text GGUF.
fn is_multimodal(name: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    const PARTS: [&str; 17] = [
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || PARTS.iter().any(|p| name.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kvs(rope: Json) -> Result<Vec<(String, Value)>> {
        let c = json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
            "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 4, "rope_scaling": rope});
        Hparams::parse(&c)?.kvs(1)
    }

    fn get<'a>(kvs: &'a [(String, Value)], k: &str) -> Option<&'a Value> {
        kvs.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    #[test]
    fn rope_scaling_keys() {
        let lin = kvs(json!({"rope_type": "linear", "factor": 2.0})).unwrap();
        assert_eq!(
            get(&lin, "llama.rope.scaling.type"),
            Some(&Value::String("linear".into()))
        );
        assert_eq!(
            get(&lin, "llama.rope.scaling.factor"),
            Some(&Value::F32(2.0))
        );
        let yarn = kvs(
            json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32.0, "attn_factor": 0.5, "attention_factor": 0.7}),
        )
        .unwrap();
        assert_eq!(
            get(&yarn, "llama.rope.scaling.original_context_length"),
            Some(&Value::U32(4096))
        );
        assert_eq!(
            get(&yarn, "llama.rope.scaling.yarn_beta_fast"),
            Some(&Value::F32(32.0))
        );
        assert_eq!(
            get(&yarn, "llama.rope.scaling.yarn_attn_factor"),
            Some(&Value::F32(0.7))
        );
        for quiet in [
            json!({"rope_type": "dynamic", "factor": 2.0}),
            json!({"rope_type": "linear"}),
            Json::Null,
        ] {
            assert!(
                get(&kvs(quiet.clone()).unwrap(), "llama.rope.scaling.type").is_none(),
                "{quiet}"
            );
        }
        assert!(kvs(json!({"rope_type": "longrope"})).is_err());
        assert!(
            kvs(json!({"type": "yarn", "factor": 4.0})).is_err(),
            "yarn needs the original context"
        );
    }

    #[test]
    fn defaults_follow_the_transformers_config_classes() {
        let k = kvs(Json::Null).unwrap();
        // LlamaConfig (checked against transformers 4.57.6's AutoConfig): 2048 positions,
        // rope_theta 1e4, rms eps 1e-6, kv heads = heads, head_dim = hidden / heads.
        assert_eq!(get(&k, "llama.context_length"), Some(&Value::U32(2048)));
        assert_eq!(get(&k, "llama.rope.freq_base"), Some(&Value::F32(10000.0)));
        assert_eq!(
            get(&k, "llama.attention.layer_norm_rms_epsilon"),
            Some(&Value::F32(1e-6))
        );
        assert_eq!(
            get(&k, "llama.attention.head_count_kv"),
            Some(&Value::U32(2))
        );
        assert_eq!(get(&k, "llama.attention.key_length"), Some(&Value::U32(4)));
        assert_eq!(get(&k, "llama.rope.dimension_count"), Some(&Value::U32(4)));
        assert_eq!(
            get(&k, "llama.feed_forward_length"),
            Some(&Value::U32(11008))
        );
    }
}
