//! Load-time options: how the server tells a runner what to load and with which engine settings.
//! They travel as command-line flags (`to_args`), so a runner's process list shows them and the
//! scheduler can compare them to decide on reloads (Ollama's `needsReload`).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FlashAttention {
    On,
    Off,
    #[default]
    Auto,
}

impl FlashAttention {
    pub fn as_str(self) -> &'static str {
        match self {
            FlashAttention::On => "on",
            FlashAttention::Off => "off",
            FlashAttention::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "on" | "true" | "1" => Some(Self::On),
            "off" | "false" | "0" => Some(Self::Off),
            "auto" | "" => Some(Self::Auto),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl KvCacheType {
    pub fn as_str(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
            KvCacheType::Q4_0 => "q4_0",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "" | "f16" => Some(Self::F16),
            "q8_0" => Some(Self::Q8_0),
            "q4_0" => Some(Self::Q4_0),
            _ => None,
        }
    }

    /// Bytes per element, for memory estimates (block overhead included).
    pub fn bytes_per_element(self) -> f64 {
        match self {
            KvCacheType::F16 => 2.0,
            KvCacheType::Q8_0 => 34.0 / 32.0,
            KvCacheType::Q4_0 => 18.0 / 32.0,
        }
    }
}

/// Everything a runner needs at start. Two runners with equal `LoadOptions` are interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LoadOptions {
    pub model: PathBuf,
    /// Context length per slot.
    pub ctx_size: u32,
    pub parallel: u32,
    pub batch: u32,
    pub ubatch: u32,
    /// Layers to offload; negative = all that fit (engine decides).
    pub gpu_layers: i32,
    pub main_gpu: Option<u32>,
    pub flash_attention: FlashAttention,
    pub kv_cache_type: KvCacheType,
    /// 0 = engine default.
    pub threads: u32,
    pub mmap: bool,
    /// Load for embeddings (pooling) instead of generation.
    pub embedding: bool,
    /// LoRA adapters applied at load (the model's `ADAPTER` layers), in order.
    #[serde(default)]
    pub lora: Vec<PathBuf>,
    /// The vision projector (mmproj GGUF, the model's `projector` layer) loaded beside the
    /// model; images are refused by a runner without one.
    #[serde(default)]
    pub projector: Option<PathBuf>,
    /// ggml RPC servers whose devices the runner adds (`host:port`; the serving host's own
    /// loopback tunnel ends to `HERD_RPC_WORKERS`, issue 20). Empty = local devices only.
    #[serde(default)]
    pub rpc: Vec<String>,
    /// llama.cpp's tensor split (`HERD_TENSOR_SPLIT`, e.g. `3,1`): share of the offloaded
    /// layers per offload device, RPC devices first. Empty = by free memory.
    #[serde(default)]
    pub tensor_split: String,
    /// The projector's smallest image in tokens, replacing mtmd's own minimum. The server sets
    /// 1 for dynamic-resolution projectors, whose images it sends already resized to the grid
    /// of their token budget (which mtmd would otherwise scale up to its minimum).
    #[serde(default)]
    pub image_min_tokens: Option<u32>,
    /// The projector's largest image in tokens (mtmd's own ceiling otherwise); the runner's
    /// micro-batch holds at least this many, since the server may send any grid up to it.
    #[serde(default)]
    pub image_max_tokens: Option<u32>,
    /// Speculative decoding with the n-gram (prompt lookup) drafter: draft tokens per step,
    /// 0 = off (`HERD_DRAFT_NGRAM`).
    #[serde(default)]
    pub draft_ngram: u32,
    /// Constrained requests draft too (`HERD_DRAFT_UNDER_GRAMMAR`); a grammar's forced text is
    /// drafted either way.
    #[serde(default)]
    pub draft_under_grammar: bool,
    /// Speculative decoding with a draft model (the model's `DRAFT` layer, a GGUF sharing its
    /// tokenizer) loaded beside it.
    #[serde(default)]
    pub draft_model: Option<PathBuf>,
    /// Most draft-model tokens per step (`draft_num_predict`); 0 = the runner's default.
    #[serde(default)]
    pub draft_max: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            ctx_size: 4096,
            parallel: 1,
            batch: 512,
            ubatch: 512,
            gpu_layers: -1,
            main_gpu: None,
            flash_attention: FlashAttention::Auto,
            kv_cache_type: KvCacheType::F16,
            threads: 0,
            mmap: true,
            embedding: false,
            lora: Vec::new(),
            projector: None,
            rpc: Vec::new(),
            tensor_split: String::new(),
            image_min_tokens: None,
            image_max_tokens: None,
            draft_ngram: 0,
            draft_under_grammar: false,
            draft_model: None,
            draft_max: 0,
        }
    }
}

impl LoadOptions {
    /// Command-line flags for a runner binary; `--socket` is added by the spawner.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--model".into(),
            self.model.to_string_lossy().into_owned(),
            "--ctx-size".into(),
            self.ctx_size.to_string(),
            "--parallel".into(),
            self.parallel.to_string(),
            "--batch".into(),
            self.batch.to_string(),
            "--ubatch".into(),
            self.ubatch.to_string(),
            "--gpu-layers".into(),
            self.gpu_layers.to_string(),
            "--flash-attn".into(),
            self.flash_attention.as_str().into(),
            "--cache-type".into(),
            self.kv_cache_type.as_str().into(),
            "--threads".into(),
            self.threads.to_string(),
        ];
        if let Some(g) = self.main_gpu {
            a.push("--main-gpu".into());
            a.push(g.to_string());
        }
        if !self.mmap {
            a.push("--no-mmap".into());
        }
        if self.embedding {
            a.push("--embedding".into());
        }
        for l in &self.lora {
            a.push("--lora".into());
            a.push(l.to_string_lossy().into_owned());
        }
        if let Some(p) = &self.projector {
            a.push("--mmproj".into());
            a.push(p.to_string_lossy().into_owned());
        }
        if !self.rpc.is_empty() {
            a.push("--rpc".into());
            a.push(self.rpc.join(","));
        }
        if !self.tensor_split.is_empty() {
            a.push("--tensor-split".into());
            a.push(self.tensor_split.clone());
        }
        if let Some(n) = self.image_min_tokens {
            a.push("--image-min-tokens".into());
            a.push(n.to_string());
        }
        if let Some(n) = self.image_max_tokens {
            a.push("--image-max-tokens".into());
            a.push(n.to_string());
        }
        if self.draft_ngram > 0 {
            a.push("--draft-ngram".into());
            a.push(self.draft_ngram.to_string());
        }
        if self.draft_under_grammar {
            a.push("--draft-under-grammar".into());
        }
        if let Some(d) = &self.draft_model {
            a.push("--draft-model".into());
            a.push(d.to_string_lossy().into_owned());
            if self.draft_max > 0 {
                a.push("--draft-max".into());
                a.push(self.draft_max.to_string());
            }
        }
        a
    }
}
