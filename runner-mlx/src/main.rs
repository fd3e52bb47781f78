//! The runner-mlx binary. Without a subcommand it serves one MLX checkpoint directory over the
//! runner protocol on a Unix socket: flags are exactly `LoadOptions::to_args()` plus
//! `--socket` (runner-protocol's `LoadArgs`, the struct runner-llamacpp parses too). What MLX
//! cannot do (LoRA adapters, vision projectors, a quantized KV cache, RPC workers, a tensor
//! split, drafting) is a typed load error, never silently ignored. The socket, protocol,
//! start-up order and SIGTERM/stdin-EOF shutdown are runner-core's (`serve`); this binary loads
//! the checkpoint on the engine thread and runs the engine (engine.rs).
//!
//! Tools: `convert-gguf GGUF DIR` (the test model's converter) and `version`.

use clap::{CommandFactory, Parser, Subcommand};
use runner_core::http::{Loaded, State};
use runner_protocol::{ErrorKind, Info, KvCacheType, LoadArgs, RunnerError};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(version, about = "herd's MLX runner: tools")]
struct Tools {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert a llama-architecture GGUF into an MLX checkpoint directory (model.safetensors,
    /// config.json, tokenizer.json, tokenizer_config.json).
    ConvertGguf { gguf: PathBuf, dir: PathBuf },
    /// Quantize a safetensors checkpoint directory with MLX's quantization (herd create
    /// --experimental -q int4|int8|nvfp4|mxfp4|mxfp8) into the new directory OUT_DIR.
    Quantize {
        src: PathBuf,
        out: PathBuf,
        /// MLX's mode: affine (needs --bits), nvfp4, mxfp4 or mxfp8 (fixed bits and group).
        #[arg(long, default_value = "affine")]
        mode: String,
        #[arg(long)]
        bits: Option<u32>,
        /// Affine's group size (default 64); the fp modes' is fixed.
        #[arg(long)]
        group_size: Option<u32>,
    },
    /// Print the MLX version this binary runs against.
    Version,
}

#[derive(Parser, Debug, Clone)]
#[command(
    version,
    about = "herd's MLX runner (speaks the runner protocol on a Unix socket)"
)]
struct Args {
    /// What every runner takes (runner-protocol), flattened. `--model` is the checkpoint
    /// directory (config.json, tokenizer.json, *.safetensors); `--ubatch`, `--gpu-layers`,
    /// `--main-gpu`, `--flash-attn`, `--threads` and `--no-mmap` are accepted and left to libmlx
    /// (one graph per step, its own device, fused attention, its own pool); what MLX cannot do
    /// is refused at load (`unsupported`).
    #[command(flatten)]
    load: LoadArgs,
    /// The dtype the model computes in: f32 (CPU output tracks llama.cpp's f32 path) or bf16
    /// (half the bytes a dense weight and the KV cache cost a step). Through herd:
    /// HERD_RUNNER_MLX_COMPUTE.
    #[arg(long, value_enum, env = "HERD_RUNNER_MLX_COMPUTE", default_value_t = runner_mlx::Compute::F32)]
    compute: runner_mlx::Compute,
    /// Test hook: a draft token adds this share of a one-token step, instead of the measured
    /// cost (0 = drafts are free: the n-gram drafter drafts its whole continuation), so that how
    /// much is drafted does not depend on the machine's load.
    #[arg(long, hide = true)]
    draft_cost: Option<f64>,
}

fn main() {
    let first = std::env::args().nth(1).unwrap_or_default();
    if Tools::command()
        .get_subcommands()
        .any(|c| c.get_name() == first)
    {
        return tool(Tools::parse().cmd);
    }
    let args = Args::parse();
    if args.load.parallel == 0 || args.load.ctx_size == 0 || args.load.batch == 0 {
        eprintln!("runner-mlx: --parallel, --ctx-size and --batch must be positive");
        std::process::exit(2);
    }
    let socket = args.load.socket.clone();
    let code = runner_core::serve::run(&socket, move |state, jobs| {
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || match load(&args, &state) {
                Ok((loaded, engine)) => {
                    state.ready(loaded);
                    engine.run(jobs);
                }
                Err(e) => state.failed(e, jobs),
            })
    });
    std::process::exit(code);
}

fn tool(cmd: Cmd) {
    match cmd {
        Cmd::ConvertGguf { gguf, dir } => {
            if let Err(e) = runner_mlx::convert::run(&gguf, &dir) {
                eprintln!("runner-mlx: convert-gguf: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Quantize {
            src,
            out,
            mode,
            bits,
            group_size,
        } => {
            let r = runner_mlx::quantize::Scheme::new(&mode, bits, group_size)
                .and_then(|s| runner_mlx::quantize::run(&src, &out, s));
            if let Err(e) = r {
                eprintln!("runner-mlx: quantize: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Version => println!("{}", runner_mlx::engine_name()),
    }
}

/// What the flags ask for that runner-mlx cannot do; None when it can serve them.
fn unsupported(args: &Args) -> Option<String> {
    let a = &args.load;
    let refused = [
        (!a.lora.is_empty(), "LoRA adapters".to_string()),
        (a.mmproj.is_some(), "vision projectors (image input)".into()),
        (
            a.cache_type != KvCacheType::F16,
            format!("the KV cache type {} (only f16)", a.cache_type.as_str()),
        ),
        (!a.rpc.is_empty(), "ggml RPC workers".into()),
        (!a.tensor_split.is_empty(), "a tensor split".into()),
        (a.draft_model.is_some(), "draft models".into()),
    ];
    refused
        .into_iter()
        .find(|(asked, _)| *asked)
        .map(|(_, what)| format!("runner-mlx does not support {what}"))
}

fn load(args: &Args, state: &State) -> Result<(Loaded, runner_mlx::engine::Engine), RunnerError> {
    let load_err = |m: String| RunnerError::new(ErrorKind::ModelLoad, m);
    if let Some(m) = unsupported(args) {
        return Err(load_err(m));
    }
    if !args.load.model.is_dir() {
        return Err(load_err(format!(
            "model directory {} does not exist",
            args.load.model.display()
        )));
    }
    state.progress(0.05);
    let mut m = runner_mlx::load(&args.load.model, args.compute).map_err(load_err)?;
    state.progress(0.9);
    // The first steps compile MLX's kernels for this model (on CUDA through NVRTC: the first
    // request to an 8B int4 model took 25 s on the H200, native/gpu-results.md run K): a
    // two-token prefill and a decode step now put that in the load instead.
    let mut warm = m.model.new_cache();
    for ids in [&[0, 0][..], &[0][..]] {
        m.model
            .forward(&mut [(&mut warm, ids)])
            .map_err(|e| load_err(format!("the warm-up step failed: {e}")))?;
    }
    drop(warm);
    state.progress(1.0);
    let shape = m.checkpoint.shape;
    let n_ctx = args.load.ctx_size as usize;
    // The cache: K and V in the compute dtype, per layer and position, for every slot.
    let elem: u64 = match args.compute {
        runner_mlx::Compute::F32 => 4,
        runner_mlx::Compute::Bf16 => 2,
    };
    let kv = 2 * elem * (shape.n_layer * shape.n_head_kv * shape.head_dim) as u64;
    let vocab: Arc<dyn runner_core::Vocabulary> = Arc::new(m.vocab);
    let info = Info {
        engine: runner_mlx::engine_name(),
        model_path: args.load.model.to_string_lossy().into_owned(),
        n_ctx: args.load.ctx_size,
        n_parallel: args.load.parallel,
        n_vocab: shape.n_vocab as u32,
        n_embd: shape.n_embd as u32,
        n_ctx_train: m.checkpoint.n_ctx_train,
        embedding: false,
        memory_bytes: m.model.size_bytes() + kv * n_ctx as u64 * args.load.parallel as u64,
        memory_device_bytes: 0,
        eog_tokens: vocab.eog_tokens(),
        // All layers on the host's one MLX device; no RPC or device split in this engine.
        ..Info::default()
    };
    let abort = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let engine = runner_mlx::engine::Engine::new(
        m.model,
        vocab.clone(),
        args.load.parallel as usize,
        n_ctx,
        args.load.batch as usize,
        abort.clone(),
    )
    .with_drafting(runner_mlx::engine::Drafting {
        ngram: args.load.draft_ngram as usize,
        under_grammar: args.load.draft_under_grammar,
        cost: args.draft_cost,
    });
    let added_specials = runner_core::http::added_specials(&*vocab);
    let loaded = Loaded {
        vocab,
        info,
        fit_prompt: runner_core::slots::fit_prompt,
        n_ctx_seq: n_ctx,
        n_ctx_asked: n_ctx,
        embed_limit: n_ctx,
        added_specials,
        abort,
        media: None,
    };
    Ok((loaded, engine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_protocol::LoadOptions;

    fn parse(o: &LoadOptions) -> Args {
        let mut o = o.clone();
        if o.model.as_os_str().is_empty() {
            o.model = "/m/dir".into();
        }
        let mut argv = vec!["runner-mlx".to_string()];
        argv.extend(o.to_args());
        argv.extend(["--socket".into(), "/tmp/s.sock".into()]);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn accepts_what_load_options_emit_and_names_what_it_cannot_serve() {
        let plain = parse(&LoadOptions {
            model: "/m/dir".into(),
            ctx_size: 2048,
            parallel: 4,
            batch: 256,
            ..LoadOptions::default()
        });
        assert_eq!(
            (plain.load.ctx_size, plain.load.parallel, plain.load.batch),
            (2048, 4, 256)
        );
        assert_eq!(unsupported(&plain), None);
        // The n-gram drafter is runner-mlx's too.
        let drafting = parse(&LoadOptions {
            draft_ngram: 4,
            draft_under_grammar: true,
            ..LoadOptions::default()
        });
        assert_eq!(unsupported(&drafting), None);
        assert_eq!(
            (drafting.load.draft_ngram, drafting.load.draft_under_grammar),
            (4, true)
        );
        let cases = [
            (
                LoadOptions {
                    lora: vec!["/m/a.gguf".into()],
                    ..LoadOptions::default()
                },
                "LoRA",
            ),
            (
                LoadOptions {
                    projector: Some("/m/p.gguf".into()),
                    ..LoadOptions::default()
                },
                "vision",
            ),
            (
                LoadOptions {
                    kv_cache_type: KvCacheType::Q8_0,
                    ..LoadOptions::default()
                },
                "q8_0",
            ),
            (
                LoadOptions {
                    rpc: vec!["127.0.0.1:5001".into()],
                    ..LoadOptions::default()
                },
                "RPC",
            ),
            (
                LoadOptions {
                    tensor_split: "3,1".into(),
                    ..LoadOptions::default()
                },
                "tensor split",
            ),
            (
                LoadOptions {
                    draft_model: Some("/m/d.gguf".into()),
                    draft_max: 4,
                    ..LoadOptions::default()
                },
                "draft model",
            ),
        ];
        for (o, want) in cases {
            let e = unsupported(&parse(&o)).expect("refused");
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
        let base = ["runner-mlx", "--model", "m", "--socket", "s"];
        assert!(Args::try_parse_from(base.iter().chain(&["--bogus"])).is_err());
        assert!(Args::try_parse_from(["runner-mlx", "--model", "m"]).is_err());
    }
}
