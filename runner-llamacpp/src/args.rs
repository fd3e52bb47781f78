//! The runner's command line: exactly `LoadOptions::to_args()` plus `--socket` (and the
//! hidden test and bench hooks), parsed once by clap.

use clap::Parser;
use runner_protocol::{FlashAttention, KvCacheType};
use std::path::PathBuf;

#[derive(Parser, Debug, Clone)]
#[command(
    version,
    about = "herd's llama.cpp runner (speaks the runner protocol on a Unix socket)"
)]
pub struct Args {
    #[arg(long)]
    pub model: PathBuf,
    /// Context length per slot.
    #[arg(long, default_value_t = 4096)]
    pub ctx_size: u32,
    #[arg(long, default_value_t = 1)]
    pub parallel: u32,
    #[arg(long, default_value_t = 512)]
    pub batch: u32,
    #[arg(long, default_value_t = 512)]
    pub ubatch: u32,
    /// Layers to offload; negative = all.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub gpu_layers: i32,
    #[arg(long)]
    pub main_gpu: Option<u32>,
    #[arg(long, default_value = "auto", value_parser = parse_fa)]
    pub flash_attn: FlashAttention,
    #[arg(long, default_value = "f16", value_parser = parse_kv)]
    pub cache_type: KvCacheType,
    /// 0 = one per available CPU.
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
    #[arg(long)]
    pub no_mmap: bool,
    /// Keep weights in their file layout (llama-server's --no-repack): slower on CPU. Output is
    /// batch-invariant either way (patches/llama.cpp); this only changes the kernels.
    #[arg(long)]
    pub no_repack: bool,
    #[arg(long)]
    pub embedding: bool,
    /// A LoRA adapter GGUF to apply (repeatable; the model's ADAPTER layers).
    #[arg(long)]
    pub lora: Vec<PathBuf>,
    /// A vision projector (mmproj GGUF, the model's projector layer) loaded through libmtmd.
    #[arg(long)]
    pub mmproj: Option<PathBuf>,
    /// ggml RPC servers (`host:port`, comma-separated) whose devices join this host's; layers
    /// are placed across them as llama.cpp places them across GPUs (RPC devices first).
    #[arg(long, value_delimiter = ',')]
    pub rpc: Vec<String>,
    /// Share of the offloaded layers per offload device (llama.cpp's --tensor-split, e.g.
    /// `3,1`), in llama.cpp's device order: RPC devices first, then local GPUs.
    #[arg(long, value_delimiter = ',')]
    pub tensor_split: Vec<f32>,
    /// The projector's smallest image in tokens (mtmd's own minimum otherwise); the server
    /// sets 1 for projectors whose images it resizes to their budget's grid itself.
    #[arg(long)]
    pub image_min_tokens: Option<u32>,
    /// The projector's largest image in tokens (mtmd's own ceiling otherwise); the context's
    /// micro-batch holds at least this many.
    #[arg(long)]
    pub image_max_tokens: Option<u32>,
    /// Choose each row's top candidates on the device that computes the logits and copy only
    /// those to the host (requests that need whole rows still get them). auto = when the output
    /// layer is on a GPU. Off by default: even with patch 0004's radix top-k it measured level
    /// with host sampling on an H200 (+1.5 % at 1 stream, -1 % at 16; native/gpu-results.md,
    /// run G).
    #[arg(long, value_enum, default_value_t = DeviceSampling::Off)]
    pub device_sampling: DeviceSampling,
    /// Candidates per row with device sampling.
    #[arg(long, hide = true, default_value_t = 256)]
    pub device_top_k: u32,
    /// Speculative decoding with the n-gram (prompt lookup) drafter: up to N draft tokens per
    /// step, continuing the latest earlier occurrence of the newest tokens; 0 = off.
    #[arg(long, default_value_t = 0)]
    pub draft_ngram: u32,
    /// Speculative decoding with a draft model (the Modelfile's DRAFT layer): a smaller GGUF
    /// with this model's tokenizer, loaded beside it, drafting up to `--draft-max` tokens per
    /// step for slots the grammar and the n-gram drafter leave without a draft.
    #[arg(long)]
    pub draft_model: Option<PathBuf>,
    /// Most draft-model tokens per step (the model's `draft_num_predict`).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub draft_max: u32,
    /// Constrained requests draft too (the grammar's forced tokens are drafted regardless).
    #[arg(long)]
    pub draft_under_grammar: bool,
    /// Test and bench hook: do not draft the tokens a grammar forces (grammar fast-forward).
    #[arg(long, hide = true)]
    pub no_grammar_ff: bool,
    /// Bench hook (GPU): do not hold a request's first token while the prompts that arrived
    /// with it are still pending (`plan::mixed`).
    #[arg(long, hide = true)]
    pub no_first_token_hold: bool,
    /// Unix socket to serve on (created 0600; a stale file is replaced).
    #[arg(long)]
    pub socket: PathBuf,
    /// Print where decode steps spend their time (per-phase means) to stderr every N decode
    /// steps; 0 = off.
    #[arg(long, hide = true, default_value_t = 0)]
    pub step_stats: u32,
    /// Test hook: slow the load down by this many ms, so the loading state is observable.
    #[arg(long, hide = true, default_value_t = 0)]
    pub load_delay_ms: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSampling {
    Auto,
    On,
    Off,
}

/// Whether to sample on the device. `auto`: when the logits are computed on a GPU, i.e. a GPU
/// backend is loaded and the output layer is offloaded (llama.cpp offloads the last
/// `gpu_layers` of `n_layer` + 1 layers, the output layer last; negative = all).
pub fn device_sampling_on(mode: DeviceSampling, gpu: bool, gpu_layers: i32, n_layer: i32) -> bool {
    match mode {
        DeviceSampling::On => true,
        DeviceSampling::Off => false,
        DeviceSampling::Auto => gpu && (gpu_layers < 0 || gpu_layers > n_layer),
    }
}

fn parse_fa(s: &str) -> Result<FlashAttention, String> {
    FlashAttention::parse(s).ok_or_else(|| format!("expected on, off or auto, got {s:?}"))
}

fn parse_kv(s: &str) -> Result<KvCacheType, String> {
    KvCacheType::parse(s).ok_or_else(|| format!("expected f16, q8_0 or q4_0, got {s:?}"))
}
