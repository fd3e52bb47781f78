//! The flags every runner takes: exactly what [`LoadOptions::to_args`](crate::LoadOptions::to_args)
//! writes, plus `--socket` (the spawner's). Both runners flatten this one clap struct into their
//! command line, so a load option reaches either runner under one spelling, and a runner that
//! cannot act on one refuses it with a typed error at load instead of failing to parse.

use crate::{FlashAttention, KvCacheType};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LoadArgs {
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
    /// Unix socket to serve on (created 0600; a stale file is replaced).
    #[arg(long)]
    pub socket: PathBuf,
}

fn parse_fa(s: &str) -> Result<FlashAttention, String> {
    FlashAttention::parse(s).ok_or_else(|| format!("expected on, off or auto, got {s:?}"))
}

fn parse_kv(s: &str) -> Result<KvCacheType, String> {
    KvCacheType::parse(s).ok_or_else(|| format!("expected f16, q8_0 or q4_0, got {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadOptions;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(o: &LoadOptions) -> LoadArgs {
        let mut argv = vec!["runner".to_string()];
        argv.extend(o.to_args());
        argv.extend(["--socket".into(), "/tmp/s.sock".into()]);
        Cli::try_parse_from(argv).unwrap().load
    }

    /// Every field of `LoadOptions` (a literal without `..`: a new field fails to compile here
    /// until it is listed) comes back through the flags a runner parses.
    #[test]
    fn every_load_option_reaches_the_runner() {
        let o = LoadOptions {
            model: "/m/b.gguf".into(),
            ctx_size: 8192,
            parallel: 4,
            batch: 256,
            ubatch: 128,
            gpu_layers: -1,
            main_gpu: Some(1),
            flash_attention: FlashAttention::On,
            kv_cache_type: KvCacheType::Q8_0,
            threads: 3,
            mmap: false,
            embedding: true,
            lora: vec!["/m/a.gguf".into(), "/m/c.gguf".into()],
            projector: Some("/m/p.gguf".into()),
            rpc: vec!["127.0.0.1:5001".into(), "127.0.0.1:5002".into()],
            tensor_split: "3,1".into(),
            image_min_tokens: Some(1),
            image_max_tokens: Some(1120),
            draft_ngram: 6,
            draft_under_grammar: true,
            draft_model: Some("/m/d.gguf".into()),
            draft_max: 8,
        };
        let want = LoadArgs {
            model: o.model.clone(),
            ctx_size: 8192,
            parallel: 4,
            batch: 256,
            ubatch: 128,
            gpu_layers: -1,
            main_gpu: Some(1),
            flash_attn: FlashAttention::On,
            cache_type: KvCacheType::Q8_0,
            threads: 3,
            no_mmap: true,
            embedding: true,
            lora: o.lora.clone(),
            mmproj: o.projector.clone(),
            rpc: o.rpc.clone(),
            tensor_split: vec![3.0, 1.0],
            image_min_tokens: Some(1),
            image_max_tokens: Some(1120),
            draft_ngram: 6,
            draft_model: o.draft_model.clone(),
            draft_max: 8,
            draft_under_grammar: true,
            socket: "/tmp/s.sock".into(),
        };
        assert_eq!(parse(&o), want);
        // The defaults parse to the runners' own defaults.
        let d = parse(&LoadOptions {
            model: "/m/a.gguf".into(),
            ..LoadOptions::default()
        });
        assert_eq!(
            (d.ctx_size, d.parallel, d.gpu_layers, d.draft_max, d.no_mmap),
            (4096, 1, -1, 4, false)
        );
        assert!(d.draft_model.is_none() && d.rpc.is_empty() && d.tensor_split.is_empty());
    }

    #[test]
    fn bad_values_are_refused() {
        let base = ["runner", "--model", "m", "--socket", "s"];
        for extra in [
            &["--cache-type", "q3"][..],
            &["--flash-attn", "maybe"],
            &["--draft-max", "0"],
            &["--draft-max", "65"],
            &["--bogus"],
        ] {
            assert!(
                Cli::try_parse_from(base.iter().chain(extra)).is_err(),
                "{extra:?}"
            );
        }
        assert!(
            Cli::try_parse_from(["runner", "--model", "m"]).is_err(),
            "no socket"
        );
    }
}
