//! Pure translation of resolved request options into what the scheduler takes: the effective
//! context length (Ollama's default, env, Modelfile and request precedence, capped at the
//! training context) and [`LoadOptions`] (a difference in any of them means a reload).

use runner_protocol::{FlashAttention, KvCacheType, LoadOptions};

use super::batch;
use super::model::Model;
use crate::api::options::Options;
use crate::scheduler::runner_choice::RunnerKind;
use crate::scheduler::{memory, KeepAlive, ModelRequest};

/// Server-wide inputs to option resolution, from `Config`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `OLLAMA_CONTEXT_LENGTH`; 0 = the memory tier default.
    pub context_length: u32,
    /// The memory tier default: Ollama picks 4096 below 23 GiB of accelerator memory, which is
    /// every CPU-only host.
    pub default_num_ctx: u32,
    pub flash_attention: FlashAttention,
    pub kv_cache_type: KvCacheType,
    /// `OLLAMA_FORMAT_TWO_PASS`: a format after thinking runs as two generations.
    pub format_two_pass: bool,
    /// `HERD_RPC_WORKERS`' tunnel ends: the workers that are up join every load (`--rpc`).
    pub rpc: Option<std::sync::Arc<crate::worker::RpcWorkers>>,
    /// `HERD_TENSOR_SPLIT`, passed to every load.
    pub tensor_split: String,
    /// `HERD_DRAFT_NGRAM` (both runners' n-gram drafting), `HERD_DRAFT_UNDER_GRAMMAR`
    /// (runner-llamacpp's drafting under a grammar) and `OLLAMA_MLX_DRAFT_UNDER_GRAMMAR`
    /// (runner-mlx's).
    pub draft_ngram: u32,
    pub draft_under_grammar: bool,
    pub mlx_draft_under_grammar: bool,
    /// GPU memory (less `OLLAMA_GPU_OVERHEAD`) that caps the tier default context
    /// (`memory::fit_num_ctx`) and bounds the automatic batch; `None` = no GPUs, no cap.
    pub fit_budget: Option<u64>,
    /// `OLLAMA_NUM_PARALLEL`: the slots a generation model loads with, whose contexts together
    /// size the automatic batch.
    pub num_parallel: u32,
    /// Total memory of each CUDA GPU: with flash attention off there, the automatic batch
    /// stays at 512 (256 on a GPU of 8 GiB or less).
    pub cuda_gpu_totals: Vec<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            context_length: 0,
            default_num_ctx: 4096,
            flash_attention: FlashAttention::Auto,
            kv_cache_type: KvCacheType::F16,
            format_two_pass: false,
            rpc: None,
            tensor_split: String::new(),
            draft_ngram: 0,
            draft_under_grammar: false,
            mlx_draft_under_grammar: false,
            fit_budget: None,
            num_parallel: 1,
            cuda_gpu_totals: Vec::new(),
        }
    }
}

/// Ollama never runs a context below this.
pub const MIN_NUM_CTX: u32 = 4;

/// The least context a model with a projector runs with (Ollama: "multimodal models require
/// at least 2048 context").
pub const VISION_MIN_NUM_CTX: u32 = 2048;

/// `num_ctx` after defaults: `requested` is what request > Modelfile > env produced (0 = none
/// set), then the tier default, capped at the model's training context, at least 4.
pub fn effective_num_ctx(requested: i64, settings: &Settings, ctx_train: Option<u32>) -> u32 {
    let mut n = if requested > 0 {
        u32::try_from(requested).unwrap_or(u32::MAX)
    } else if settings.context_length > 0 {
        settings.context_length
    } else {
        settings.default_num_ctx
    };
    if let Some(train) = ctx_train.filter(|&t| t > 0) {
        n = n.min(train);
    }
    n.max(MIN_NUM_CTX)
}

/// The runner's load options for `model` under `opts`: `api::convert`'s mapping of the runner
/// options, with the effective context length and the engine-wide settings. `parallel` is left
/// 0 for the scheduler to fill from `OLLAMA_NUM_PARALLEL`, except for embedding models, which
/// Ollama runs with one slot.
pub fn load_options(opts: &Options, model: &Model, settings: &Settings) -> LoadOptions {
    let embedding = model.is_embedding();
    let mut load = LoadOptions {
        model: model.path.clone(),
        parallel: if embedding { 1 } else { 0 },
        flash_attention: settings.flash_attention,
        kv_cache_type: settings.kv_cache_type,
        embedding,
        // A model never runs without its adapter: the runner applies these or fails to load.
        lora: model.view.adapter_paths.clone(),
        // Ollama's runner loads the first projector layer.
        projector: model.view.projector_paths.first().cloned(),
        // The DRAFT layer drafts for the model (speculative decoding in the runner).
        draft_model: model.view.draft_path.clone(),
        ..LoadOptions::default()
    };
    // A dynamic-resolution projector gets images already resized to their budget's grid
    // (crate::images::budget), which may be under mtmd's own minimum: it must keep them.
    load.image_min_tokens = model.image_geometry.map(|_| 1);
    load.image_max_tokens = model.image_geometry.map(|g| g.max_tokens);
    opts.apply_to_load(&mut load);
    engine_wide(&mut load, settings, model.runner);
    load.ctx_size = effective_num_ctx(opts.runner.num_ctx, settings, model.ctx_train);
    let tier_default = opts.runner.num_ctx <= 0 && settings.context_length == 0;
    if let Some(budget) = settings.fit_budget.filter(|_| tier_default) {
        load.ctx_size = memory::fit_num_ctx(&model.memory, &load, budget);
    }
    if load.projector.is_some() {
        // Ollama's floor for multimodal models (sched.go getRunner), under the training cap.
        let floor = model
            .ctx_train
            .filter(|&t| t > 0)
            .unwrap_or(u32::MAX)
            .min(VISION_MIN_NUM_CTX);
        load.ctx_size = load.ctx_size.max(floor);
    }
    if embedding {
        load.batch = batch::embedding_batch(opts.runner.num_batch, load.ctx_size);
        load.ubatch = load.batch;
    } else if model.runner == RunnerKind::Llamacpp {
        // Ollama sizes the batch this way for llama-server only (not for its MLX runner).
        (load.batch, load.ubatch) = batch::generation(opts.runner.num_batch, || {
            automatic_batch(&load, model, settings)
        });
    }
    Options::clamp_load(&mut load, u32::try_from(cpus()).unwrap_or(u32::MAX));
    load
}

/// The CPUs this process may use, read once (as Go's `runtime.NumCPU`, which Ollama reads at
/// start): `available_parallelism` reads the cgroup's quota files on every call, and every
/// request is planned.
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// [`batch::automatic_generation`] for `load` (at the default batch) under `settings`: the
/// slots' contexts together, the load's predicted bytes against the GPU budget, and whether
/// flash attention is off on a CUDA GPU. The budget is the GPUs' total less the overhead, not
/// what is free when the runner starts (Ollama's input), so the same request always plans the
/// same batch and an idle runner is reused rather than reloaded for a batch that moved.
fn automatic_batch(load: &LoadOptions, model: &Model, settings: &Settings) -> u32 {
    let parallel = match load.parallel {
        0 => settings.num_parallel.max(1),
        p => p,
    };
    let at_default = LoadOptions {
        parallel,
        batch: batch::DEFAULT,
        ubatch: batch::DEFAULT,
        ..load.clone()
    };
    let cuda_without_fa = (settings.flash_attention == FlashAttention::Off)
        .then(|| settings.cuda_gpu_totals.iter().copied().min())
        .flatten();
    batch::automatic_generation(
        u64::from(load.ctx_size) * u64::from(parallel),
        memory::estimate(&model.memory, &at_default),
        settings.fit_budget.unwrap_or(0),
        cuda_without_fa,
    )
}

/// The server-wide engine settings for a model served by `runner`: n-gram drafting for both
/// (each runner with its own switch for drafting under a grammar); RPC workers and the tensor
/// split are runner-llamacpp's only, so an MLX model loads without them rather than failing on
/// flags its engine does not have.
fn engine_wide(load: &mut LoadOptions, settings: &Settings, runner: RunnerKind) {
    load.draft_ngram = settings.draft_ngram;
    if runner != RunnerKind::Llamacpp {
        load.draft_under_grammar = settings.mlx_draft_under_grammar;
        return;
    }
    load.rpc = settings
        .rpc
        .as_ref()
        .map_or_else(Vec::new, |w| w.endpoints());
    load.tensor_split = settings.tensor_split.clone();
    load.draft_under_grammar = settings.draft_under_grammar;
}

/// What the handler asks the scheduler for.
pub fn model_request(
    model: &Model,
    load: LoadOptions,
    keep_alive: Option<KeepAlive>,
) -> ModelRequest {
    let mut for_estimate = load.clone();
    for_estimate.parallel = for_estimate.parallel.max(1);
    ModelRequest {
        name: model.display_name.clone(),
        digest: model.digest.clone(),
        // The draft model's weights load beside the model's (its KV shows in the runner's
        // report, which later loads of these options plan with).
        memory: memory::estimate(&model.memory, &for_estimate)
            + load
                .draft_model
                .as_ref()
                .map_or(0, |_| model.view.draft_size),
        kv_per_slot: memory::kv_cache_bytes(
            &model.memory,
            for_estimate.ctx_size,
            1,
            for_estimate.kv_cache_type.bytes_per_element(),
        ),
        options: load,
        keep_alive,
        runner: model.runner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_wide_settings_reach_llamacpp_only() {
        let s = Settings {
            tensor_split: "3,1".into(),
            draft_ngram: 6,
            draft_under_grammar: true,
            ..Settings::default()
        };
        let mlx_under = Settings {
            mlx_draft_under_grammar: true,
            draft_under_grammar: false,
            ..s.clone()
        };
        // (settings, runner) → (tensor_split, draft_ngram, draft_under_grammar)
        let cases = [
            (&s, RunnerKind::Llamacpp, ("3,1", 6, true)),
            (&s, RunnerKind::Mlx, ("", 6, false)),
            (&mlx_under, RunnerKind::Mlx, ("", 6, true)),
            (&mlx_under, RunnerKind::Llamacpp, ("3,1", 6, false)),
        ];
        for (s, runner, (split, ngram, under)) in cases {
            let mut load = LoadOptions::default();
            engine_wide(&mut load, s, runner);
            assert_eq!(
                (
                    load.tensor_split.as_str(),
                    load.draft_ngram,
                    load.draft_under_grammar
                ),
                (split, ngram, under),
                "{runner:?}"
            );
            assert!(load.rpc.is_empty());
        }
    }

    /// (batch, ubatch) through load_options, as Ollama launches llama-server: embedding models
    /// 2048 capped at the context (TestModelOptionsEmbeddingNumBatchDefault); generation models
    /// a set num_batch as both (appendBatchArgs), unset the automatic batch by the slots'
    /// context and the GPU budget (automaticGenerationBatch); runner-mlx models keep 512 unless
    /// set. The batch never exceeds a slot's context.
    #[test]
    fn load_batch_table() {
        const GIB: u64 = 1 << 30;
        let model = |caps: &[&str], runner, file_size| Model {
            display_name: "m:latest".into(),
            full_name: "m".into(),
            digest: String::new(),
            view: Default::default(),
            path: "m.gguf".into(),
            ctx_train: None,
            embedding_length: None,
            memory: memory::MemoryInputs {
                file_size,
                ..Default::default()
            },
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
            details: Default::default(),
            template: std::sync::Arc::new(crate::prompt::Template::default_go()),
            bos_text: None,
            runner,
            image_geometry: None,
        };
        let cpu = Settings::default();
        let parallel4 = Settings {
            num_parallel: 4,
            ..Settings::default()
        };
        let gpu14 = Settings {
            fit_budget: Some(14 * GIB),
            cuda_gpu_totals: vec![14 * GIB],
            ..Settings::default()
        };
        let gpu14_no_fa = Settings {
            flash_attention: FlashAttention::Off,
            ..gpu14.clone()
        };
        let gpu6_no_fa = Settings {
            fit_budget: Some(6 * GIB),
            cuda_gpu_totals: vec![6 * GIB],
            ..gpu14_no_fa.clone()
        };
        const EMB: &[&str] = &["embedding"];
        const GEN: &[&str] = &["completion"];
        use RunnerKind::{Llamacpp as L, Mlx as M};
        // (settings, caps, runner, model bytes, num_batch, num_ctx) → (batch, ubatch)
        type Case<'a> = (
            &'a Settings,
            &'a [&'a str],
            RunnerKind,
            u64,
            Option<i64>,
            i64,
        );
        let cases: [(Case, (u32, u32)); 19] = [
            ((&cpu, EMB, L, 0, None, 8192), (2048, 2048)),
            ((&cpu, EMB, L, 0, None, 1024), (1024, 1024)),
            ((&cpu, EMB, L, 0, Some(4096), 8192), (4096, 4096)),
            // A set num_batch is the micro-batch too (was 1024/512).
            ((&cpu, GEN, L, 0, Some(1024), 8192), (1024, 1024)),
            ((&cpu, GEN, L, 0, Some(2048), 8192), (2048, 2048)),
            ((&cpu, GEN, L, 0, Some(2048), 1024), (1024, 1024)),
            ((&cpu, GEN, L, 0, Some(0), 8192), (2048, 512)),
            ((&gpu14_no_fa, GEN, L, 0, Some(2048), 131072), (2048, 2048)),
            // Unset: by the slots' context (CPU: no memory bound).
            ((&cpu, GEN, L, 0, None, 4096), (512, 512)),
            ((&cpu, GEN, L, 0, None, 8192), (1024, 1024)),
            ((&cpu, GEN, L, 0, None, 65536), (2048, 2048)),
            ((&parallel4, GEN, L, 0, None, 2048), (1024, 1024)),
            // GPU: held back by the load's share of the budget, or FA off on CUDA.
            ((&gpu14, GEN, L, 8 * GIB, None, 131072), (2048, 2048)),
            ((&gpu14, GEN, L, 9 * GIB, None, 131072), (1024, 1024)),
            ((&gpu14, GEN, L, 12 * GIB, None, 131072), (512, 512)),
            ((&gpu14_no_fa, GEN, L, 8 * GIB, None, 131072), (512, 512)),
            ((&gpu6_no_fa, GEN, L, 3 * GIB, None, 131072), (256, 256)),
            // runner-mlx: Ollama's default 512 unless set.
            ((&cpu, GEN, M, 0, None, 65536), (512, 512)),
            ((&cpu, GEN, M, 0, Some(1024), 65536), (1024, 1024)),
        ];
        for ((settings, caps, runner, bytes, num_batch, num_ctx), want) in cases {
            let mut o = Options::defaults(0);
            o.runner.num_ctx = num_ctx;
            o.runner.num_batch = num_batch;
            let load = load_options(&o, &model(caps, runner, bytes), settings);
            assert_eq!(
                (load.batch, load.ubatch),
                want,
                "{caps:?} {runner:?} {bytes} {num_batch:?} ctx {num_ctx} {settings:?}"
            );
        }
    }

    #[test]
    fn num_ctx_precedence_and_caps() {
        let s = |env| Settings {
            context_length: env,
            ..Settings::default()
        };
        // (requested, env, ctx_train) → effective
        let cases = [
            (0, 0, None, 4096),
            (0, 0, Some(2048), 2048),
            (0, 8192, None, 8192),
            (0, 8192, Some(32768), 8192),
            (1024, 8192, Some(32768), 1024),
            (65536, 0, Some(32768), 32768),
            (2, 0, None, MIN_NUM_CTX),
            (-5, 0, None, 4096),
            (i64::MAX, 0, None, u32::MAX),
        ];
        for (req, env, train, want) in cases {
            assert_eq!(
                effective_num_ctx(req, &s(env), train),
                want,
                "{req} {env} {train:?}"
            );
        }
    }
}
