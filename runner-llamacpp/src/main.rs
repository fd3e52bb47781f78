//! runner-llamacpp: serves one GGUF model over the runner protocol (runner_protocol) on a Unix
//! socket. Flags are exactly `LoadOptions::to_args()` plus `--socket`.
//!
//! The socket, its protocol, start-up order and SIGTERM drain are runner-core's (`serve`); this
//! binary loads the model and creates the context on the engine thread, then runs the engine.
//! `runner-llamacpp quantize …` instead runs the one-shot quantizer (quantize.rs), and
//! `runner-llamacpp rpc-server …` serves this host's devices to `herd worker` (rpc_server.rs).

mod args;
mod embed;
mod engine;
mod ffi;
mod memory;
#[cfg(test)]
mod numerics;
mod placement;
mod plan;
mod quantize;
mod rpc_server;
mod sampling;
mod vocab;

use args::{device_sampling_on, host_switch_on, Args};
use clap::Parser;
use runner_core::http::{Loaded, State};
use runner_protocol::{ErrorKind, FlashAttention, Info, KvCacheType, RunnerError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Engine name and pin reported in `/info`.
const ENGINE: &str = concat!("llama.cpp ", env!("HERD_LLAMA_BUILD"));

fn main() {
    // `runner-llamacpp quantize …` is a separate one-shot tool (quantize.rs).
    if std::env::args_os().nth(1).is_some_and(|a| a == "quantize") {
        std::process::exit(quantize::main(std::env::args_os().skip(1)));
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "rpc-server")
    {
        std::process::exit(rpc_server::main(std::env::args_os().skip(1)));
    }
    // `runner-llamacpp devices`: the devices' memory as JSON, for the server's startup.
    if std::env::args_os().nth(1).is_some_and(|a| a == "devices") {
        std::process::exit(memory::devices_main());
    }
    let args = Args::parse();
    if args.load.parallel == 0 || args.load.ctx_size == 0 || args.load.batch == 0 {
        eprintln!("runner-llamacpp: --parallel, --ctx-size and --batch must be positive");
        std::process::exit(2);
    }
    if !args.no_graph_per_shape {
        // Before any thread starts: the environment is read by the CUDA backend at its first
        // graph.
        ffi::prefer_graph_per_shape();
    }
    let socket = args.load.socket.clone();
    let code = runner_core::serve::run(&socket, move |state, jobs| {
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || load_and_run(&args, &state, jobs))
    });
    std::process::exit(code);
}

/// Engine thread body: load, publish, then run the engine until shutdown. After a failed load it
/// answers every queued job with the load error.
fn load_and_run(
    args: &Args,
    state: &State,
    jobs: std::sync::mpsc::Receiver<runner_core::jobs::Job>,
) {
    let lib_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let log = if std::env::var_os("OLLAMA_DEBUG")
        .is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
    {
        ffi::LogLevel::Debug
    } else {
        ffi::LogLevel::Warn
    };
    let devices = ffi::init_backends(&lib_dir, log);
    let loaded = if devices == 0 {
        Err(RunnerError::new(
            ErrorKind::ModelLoad,
            format!(
                "no ggml backend module (libggml-cpu*.so) found in {}",
                lib_dir.display()
            ),
        ))
    } else {
        load(args, state)
    };
    match loaded {
        Ok(loaded) => {
            state.ready(loaded.0);
            // CPU batch invariance needs isolated prompt steps; the patches behind it are
            // CPU-only, and on a GPU mixed steps start many streams sooner.
            let isolate = !(ffi::supports_gpu_offload() && args.load.gpu_layers != 0);
            let (projector, drafter, prewake) = (loaded.2, loaded.3, loaded.4);
            engine::Engine::new(
                loaded.1,
                args.load.parallel as usize,
                args.load.batch as usize,
                isolate,
            )
            .with_projector(projector)
            .with_draft_model(drafter)
            .with_sample_threads(args.sample_threads)
            .with_step_stats(args.step_stats)
            .with_first_token_hold(!args.no_first_token_hold)
            .with_prewake(prewake)
            .with_padding(match args.step_padding {
                args::StepPadding::Auto => !isolate,
                args::StepPadding::On => true,
                args::StepPadding::Off => false,
            })
            .with_drafting(engine::Drafting {
                ngram: args.load.draft_ngram as usize,
                under_grammar: args.load.draft_under_grammar,
                grammar_ff: !args.no_grammar_ff,
                cost: args.draft_cost,
                shaped: !isolate,
            })
            .run(jobs);
        }
        Err(e) => state.failed(e, jobs),
    }
}

/// A loaded model: what the protocol layer knows, the engine's context, the projector, the
/// draft model and whether the sampling pool is woken before logits land (`args::host_switch_on`).
type LoadedParts = (
    Loaded,
    ffi::Context,
    Option<Arc<ffi::Projector>>,
    Option<engine::draft_model::DraftModel>,
    bool,
);

fn load(args: &Args, state: &State) -> Result<LoadedParts, RunnerError> {
    let load_err = |m: String| RunnerError::new(ErrorKind::ModelLoad, m);
    if !args.load.model.is_file() {
        return Err(load_err(format!(
            "model file {} does not exist",
            args.load.model.display()
        )));
    }
    // Remote devices join before the load, so llama.cpp's default device list includes them.
    let remote =
        ffi::rpc::add_servers(&args.load.rpc).map_err(|m| load_err(format!("RPC: {m}")))?;
    if remote > 0 {
        eprintln!(
            "runner-llamacpp: {remote} RPC device(s) from {}",
            args.load.rpc.join(",")
        );
    }
    let params = ffi::ModelParams {
        gpu_layers: args.load.gpu_layers,
        main_gpu: args.load.main_gpu,
        mmap: !args.load.no_mmap,
        repack: !args.no_repack,
        tensor_split: args.load.tensor_split.clone(),
    };
    let delay = Duration::from_millis(args.load_delay_ms);
    let mut delayed = false;
    let model = ffi::Model::load(&args.load.model, &params, |p| {
        if !delayed && !delay.is_zero() {
            delayed = true;
            std::thread::sleep(delay);
        }
        state.progress(p)
    })
    .map_err(load_err)?;
    let model = Arc::new(model);
    let threads = match args.load.threads {
        0 => std::thread::available_parallelism()
            .map(|n| n.get() as i32)
            .unwrap_or(4),
        n => n as i32,
    };
    let projector = match &args.load.mmproj {
        None => None,
        Some(p) => Some(Arc::new(
            ffi::Projector::load(
                p,
                model.clone(),
                threads,
                args.load.gpu_layers != 0,
                (args.load.image_min_tokens, args.load.image_max_tokens),
            )
            .map_err(|m| load_err(format!("projector: {m}")))?,
        )),
    };
    // An image's tokens go through the model in one micro-batch (non-causal attention), so
    // the context's batch and micro-batch hold the largest image the projector makes.
    let image_tokens = match &projector {
        Some(p) => engine::vision::max_image_tokens(p)
            .map_err(|m| load_err(format!("projector: {m}")))?
            .max(args.load.image_max_tokens.unwrap_or(0)),
        None => 0,
    };
    let n_batch = args.load.batch.max(image_tokens);
    let cp = ffi::ContextParams {
        n_ctx: args.load.ctx_size.saturating_mul(args.load.parallel),
        n_seq_max: args.load.parallel,
        n_batch,
        n_ubatch: args.load.ubatch.min(args.load.batch).max(image_tokens),
        threads,
        flash_attn: match args.load.flash_attn {
            FlashAttention::On => Some(true),
            FlashAttention::Off => Some(false),
            FlashAttention::Auto => None,
        },
        kv_type: match args.load.cache_type {
            KvCacheType::F16 => ffi::KvType::F16,
            KvCacheType::Q8_0 => ffi::KvType::Q8_0,
            KvCacheType::Q4_0 => ffi::KvType::Q4_0,
        },
    };
    let (gated, why) = host_switch_on(
        args.mask_after_launch,
        ffi::supports_gpu_offload(),
        args.load.gpu_layers,
        model.n_layer(),
    );
    if gated {
        runner_core::grammar::gate::enable();
        eprintln!("runner-llamacpp: grammar masks wait for the next step's launch ({why})");
    }
    let (device, why) = device_sampling_on(
        args.device_sampling,
        ffi::supports_gpu_offload(),
        args.load.gpu_layers,
        model.n_layer(),
        args.load.parallel,
        args.load.draft_ngram > 0 || args.load.draft_model.is_some(),
    );
    let mut ctx =
        ffi::Context::with_device_top_k(model.clone(), &cp, device.then_some(args.device_top_k))
            .map_err(|m| RunnerError::new(ErrorKind::OutOfMemory, m))?;
    ctx.apply_lora(&args.load.lora)
        .map_err(|m| RunnerError::new(ErrorKind::ModelLoad, m))?;
    let pooled = ctx.pooling() != ffi::Pooling::None;
    if device && pooled {
        // An embedding model: every /embed call would detach and reattach the chains.
        ctx.disable_device_sampling();
        eprintln!("runner-llamacpp: device sampling off (an embedding model)");
    } else if device && !ctx.device_top_k_offloaded() {
        ctx.disable_device_sampling();
        eprintln!("runner-llamacpp: device sampling off (the output device cannot run top-k)");
    } else if let Some(k) = ctx.device_top_k() {
        eprintln!("runner-llamacpp: device sampling on, top {k} candidates per row ({why})");
    } else {
        eprintln!("runner-llamacpp: device sampling off ({why})");
    }
    let (prewake, why) = host_switch_on(
        args.prewake,
        ffi::supports_gpu_offload(),
        args.load.gpu_layers,
        model.n_layer(),
    );
    eprintln!(
        "runner-llamacpp: sampling pool prewake {} ({why})",
        if prewake { "on" } else { "off" }
    );
    let drafter = match &args.load.draft_model {
        None => None,
        Some(p) => {
            // On the target's devices: all layers offloaded unless the target stays on the CPU.
            let params = ffi::ModelParams {
                gpu_layers: if args.load.gpu_layers == 0 { 0 } else { -1 },
                ..params.clone()
            };
            let cp = ffi::ContextParams {
                n_batch: args.load.batch,
                n_ubatch: args.load.ubatch.min(args.load.batch),
                ..cp.clone()
            };
            let d = engine::draft_model::DraftModel::load(
                p,
                &model,
                &params,
                &cp,
                args.load.draft_max as usize,
            )
            .map_err(|m| load_err(format!("draft model: {m}")))?;
            eprintln!(
                "runner-llamacpp: draft model {} drafts up to {} tokens per step",
                p.display(),
                args.load.draft_max
            );
            Some(d)
        }
    };
    let mut buffers = ctx.memory_breakdown();
    if let Some(d) = &drafter {
        buffers.extend(d.memory());
    }
    let n_ctx_seq = ctx.n_ctx_seq() as usize;
    let info = Info {
        engine: ENGINE.to_string(),
        model_path: args.load.model.to_string_lossy().into_owned(),
        n_ctx: n_ctx_seq as u32,
        n_parallel: args.load.parallel,
        n_vocab: model.n_vocab() as u32,
        n_embd: model.n_embd() as u32,
        n_ctx_train: model.n_ctx_train().max(0) as u32,
        embedding: args.load.embedding || pooled,
        memory_bytes: 0,
        memory_device_bytes: 0,
        eog_tokens: model.eog_tokens(),
        placement: placement(&model, args),
        devices: memory::report(&ffi::devices(), &buffers),
    };
    let mut info = info;
    (info.memory_bytes, info.memory_device_bytes) = memory::totals(
        &info.devices,
        args::whole_model_offloaded(
            ffi::supports_gpu_offload(),
            args.load.gpu_layers,
            model.n_layer(),
        ),
    );
    if info.memory_bytes == 0 {
        // llama.cpp's breakdown threw: the file and the state are a lower bound, device unknown.
        info.memory_bytes = model.size_bytes() + ctx.state_size() as u64;
    }
    let embed_limit = if pooled {
        n_ctx_seq.min(cp.n_ubatch as usize)
    } else {
        n_ctx_seq
    };
    let abort = ctx.abort_flag();
    let added_specials = runner_core::http::added_specials(&*model);
    Ok((
        Loaded {
            vocab: model,
            info,
            fit_prompt: runner_core::slots::fit_prompt,
            n_ctx_seq,
            n_ctx_asked: args.load.ctx_size as usize,
            embed_limit,
            added_specials,
            abort,
            media: projector.clone().map(|p| {
                Arc::new(engine::vision::Images(p)) as Arc<dyn runner_core::jobs::MediaPrompt>
            }),
        },
        ctx,
        projector,
        drafter,
        prewake,
    ))
}

/// Where the layers went (placement.rs): llama.cpp's offload devices in its default order (RPC
/// devices first, then local GPUs; only the main GPU with `--main-gpu`), split by free memory.
fn placement(model: &ffi::Model, args: &Args) -> Vec<runner_protocol::LayerPlacement> {
    let all = ffi::rpc::devices();
    let mut offload: Vec<&ffi::rpc::Device> = all.iter().filter(|d| d.rpc && !d.cpu).collect();
    offload.extend(all.iter().filter(|d| !d.rpc && !d.cpu));
    if let Some(g) = args.load.main_gpu {
        offload = offload.into_iter().skip(g as usize).take(1).collect();
    }
    let host_free = all.iter().find(|d| d.cpu).map_or(0, |d| d.free);
    let weights: Vec<f32> = if args.load.tensor_split.iter().any(|w| *w != 0.0) {
        let mut w = args.load.tensor_split.clone();
        w.resize(offload.len(), 0.0);
        w
    } else {
        offload
            .iter()
            .map(|d| {
                if d.free == 0 && d.total == 0 {
                    host_free as f32
                } else {
                    d.free as f32
                }
            })
            .collect()
    };
    let counts =
        placement::layers_per_device(model.n_layer() as u32, args.load.gpu_layers, &weights);
    let cpu = all.iter().find(|d| d.cpu);
    offload
        .iter()
        .copied()
        .chain(cpu)
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(d, layers)| runner_protocol::LayerPlacement {
            device: d.name.clone(),
            description: d.description.clone(),
            remote: d.rpc,
            layers,
        })
        .collect()
}

/// The build recipe's pure parts (key, flags, patch order) are tested with the crate.
#[cfg(test)]
#[path = "../build/recipe.rs"]
mod recipe;

#[cfg(test)]
mod tests {
    use super::*;
    use args::DeviceSampling;
    use runner_protocol::LoadOptions;

    fn parse(o: &LoadOptions) -> Args {
        let mut argv = vec!["runner-llamacpp".to_string()];
        argv.extend(o.to_args());
        argv.extend(["--socket".into(), "/tmp/s.sock".into()]);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn takes_the_shared_load_flags_and_its_own() {
        // Every load flag's mapping is runner-protocol's round-trip test (args.rs); here: the
        // flattened struct parses what LoadOptions emits beside this runner's own switches,
        // which default off.
        let o = LoadOptions {
            model: "/m/a.gguf".into(),
            main_gpu: Some(1),
            draft_model: Some("/m/d.gguf".into()),
            draft_max: 8,
            ..LoadOptions::default()
        };
        let a = parse(&o);
        assert_eq!((a.load.main_gpu, a.load.draft_max), (Some(1), 8));
        assert_eq!(a.load.draft_model, o.draft_model);
        assert_eq!(a.load.socket, PathBuf::from("/tmp/s.sock"));
        assert!(!a.no_repack && !a.no_grammar_ff && !a.no_first_token_hold);
        assert_eq!(
            (
                a.device_sampling,
                a.device_top_k,
                a.step_stats,
                a.load_delay_ms
            ),
            (DeviceSampling::Off, 256, 0, 0)
        );
    }

    #[test]
    fn device_sampling_follows_the_output_layer_in_auto() {
        use DeviceSampling::*;
        // (mode, gpu backend, gpu_layers, n_layer, slots, drafts, on)
        let cases = [
            (Auto, true, -1, 32, 1, false, true),
            (Auto, true, 99, 32, 1, false, true),
            (Auto, true, 33, 32, 1, false, true),
            (Auto, true, 32, 32, 1, false, false),
            (Auto, true, 0, 32, 1, false, false),
            (Auto, false, -1, 32, 1, false, false),
            (Auto, true, -1, 32, 2, false, false),
            (Auto, true, -1, 32, 16, false, false),
            (Auto, true, -1, 32, 1, true, false),
            (On, false, 0, 32, 16, false, true),
            (On, true, -1, 32, 1, true, false),
            (Off, true, -1, 32, 1, false, false),
        ];
        for (mode, gpu, layers, n_layer, slots, drafts, want) in cases {
            let (on, why) = device_sampling_on(mode, gpu, layers, n_layer, slots, drafts);
            assert_eq!(
                on, want,
                "{mode:?} gpu={gpu} layers={layers} slots={slots} drafts={drafts}: {why}"
            );
        }
        let base = ["runner-llamacpp", "--model", "m", "--socket", "s"];
        let a = Args::try_parse_from(base).unwrap();
        assert_eq!((a.device_sampling, a.device_top_k), (Off, 256));
        let a = Args::try_parse_from(base.iter().chain(&["--device-sampling", "on"])).unwrap();
        assert_eq!(a.device_sampling, On);
        assert!(Args::try_parse_from(base.iter().chain(&["--device-sampling", "gpu"])).is_err());
    }

    #[test]
    fn host_switches_are_on_when_the_whole_model_is_on_a_gpu() {
        use args::HostSwitch::*;
        // (mode, gpu backend, gpu_layers, n_layer, on)
        let cases = [
            (Auto, true, -1, 32, true),
            (Auto, true, 33, 32, true),
            (Auto, true, 32, 32, false),
            (Auto, true, 0, 32, false),
            (Auto, false, -1, 32, false),
            (On, false, 0, 32, true),
            (Off, true, -1, 32, false),
        ];
        for (mode, gpu, layers, n_layer, want) in cases {
            let (on, why) = host_switch_on(mode, gpu, layers, n_layer);
            assert_eq!(on, want, "{mode:?} gpu={gpu} layers={layers}: {why}");
        }
        let base = ["runner-llamacpp", "--model", "m", "--socket", "s"];
        assert_eq!(Args::try_parse_from(base).unwrap().prewake, Auto);
        let a = Args::try_parse_from(base.iter().chain(&["--prewake", "off"])).unwrap();
        assert_eq!(a.prewake, Off);
        assert!(Args::try_parse_from(base.iter().chain(&["--prewake", "yes"])).is_err());
        // --mask-after-launch: the same switch; bare means on (the bench's A/B wrappers).
        assert_eq!(Args::try_parse_from(base).unwrap().mask_after_launch, Auto);
        let a = Args::try_parse_from(base.iter().chain(&["--mask-after-launch"])).unwrap();
        assert_eq!(a.mask_after_launch, On);
        let a = Args::try_parse_from(base.iter().chain(&["--mask-after-launch", "off"])).unwrap();
        assert_eq!(a.mask_after_launch, Off);
    }

    #[test]
    fn unknown_flags_and_bad_values_are_rejected() {
        let base = ["runner-llamacpp", "--model", "m", "--socket", "s"];
        assert!(Args::try_parse_from(base.iter().chain(&["--bogus"])).is_err());
        assert!(Args::try_parse_from(base.iter().chain(&["--cache-type", "q3"])).is_err());
        assert!(Args::try_parse_from(base.iter().chain(&["--flash-attn", "maybe"])).is_err());
        assert!(
            Args::try_parse_from(["runner-llamacpp", "--model", "m"]).is_err(),
            "--socket is required"
        );
    }
}
