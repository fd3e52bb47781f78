//! runner-llamacpp's command line: runner-protocol's `LoadArgs` (exactly `LoadOptions::to_args()`
//! plus `--socket`) and this engine's own switches and hidden test and bench hooks, parsed once.

use clap::Parser;
use runner_protocol::LoadArgs;

#[derive(Parser, Debug, Clone)]
#[command(
    version,
    about = "herd's llama.cpp runner (speaks the runner protocol on a Unix socket)"
)]
pub struct Args {
    /// What every runner takes (runner-protocol), flattened: `--model`, `--ctx-size`, ...
    #[command(flatten)]
    pub load: LoadArgs,
    /// Keep weights in their file layout (llama-server's --no-repack): slower on CPU. Output is
    /// batch-invariant either way (patches/llama.cpp); this only changes the kernels.
    #[arg(long)]
    pub no_repack: bool,
    /// Choose each row's top candidates on the device that computes the logits and copy only
    /// those to the host (requests that need whole rows still get them). auto = when the output
    /// layer is on a GPU and the context has one slot. Off by default: with patch 0004's radix
    /// top-k it measured +1.5 % at 1 stream and level to -1 % at 16 on an H200 (run G), and
    /// level at 1 stream on an H100 (run T: the host's 36 µs scan of the row moves to the GPU;
    /// native/gpu-results.md).
    #[arg(long, value_enum, default_value_t = DeviceSampling::Off)]
    pub device_sampling: DeviceSampling,
    /// Candidates per row with device sampling.
    #[arg(long, hide = true, default_value_t = 256)]
    pub device_top_k: u32,
    /// Test hook: a draft token adds this share of a one-token step, instead of the measured
    /// cost (0 = drafts are free: the n-gram drafter drafts its whole continuation), so that how
    /// much is drafted does not depend on the machine's load.
    #[arg(long, hide = true)]
    pub draft_cost: Option<f64>,
    /// Test and bench hook: do not draft the tokens a grammar forces (grammar fast-forward).
    #[arg(long, hide = true)]
    pub no_grammar_ff: bool,
    /// Bench hook (GPU): one CUDA graph for every step token count (llama.cpp's own keying)
    /// instead of one per count (patch 0005, `ffi::prefer_graph_per_shape`).
    #[arg(long, hide = true)]
    pub no_graph_per_shape: bool,
    /// One-token decode steps pad idle sequences so that the step keeps the last one's sequence
    /// set as streams end (`plan::padding`): auto = on a GPU (where a new step shape costs a
    /// graph rebuild and CUDA graph capture), on = also on the CPU (tests), off = never (A/B).
    #[arg(long, hide = true, value_enum, default_value_t = StepPadding::Auto)]
    pub step_padding: StepPadding,
    /// Bench hook (GPU): do not hold a request's first token while the prompts that arrived
    /// with it are still pending (`plan::mixed`).
    #[arg(long, hide = true)]
    pub no_first_token_hold: bool,
    /// A constrained slot's grammar worker gets its commit only after the step's rows are all
    /// sampled, and computes its next mask only once the engine has launched the next step
    /// (runner-core `grammar::gate`), so that masks do not compete for the cores with sampling,
    /// building and launching the step. auto (default) = when the whole model runs on a GPU
    /// ([`host_switch_on`]; on a CPU the launch is the whole step); bare `--mask-after-launch`
    /// = on.
    #[arg(long, hide = true, value_enum, default_value_t = HostSwitch::Auto, num_args = 0..=1, default_missing_value = "on")]
    pub mask_after_launch: HostSwitch,
    /// Wake the sampling pool shortly before each decode step's logits land, predicted from the
    /// last decode step's wait (`engine::prewake`), instead of when they land: auto = when the
    /// whole model runs on a GPU (`host_switch_on`), on = also otherwise (tests), off = never (A/B).
    #[arg(long, hide = true, value_enum, default_value_t = HostSwitch::Auto)]
    pub prewake: HostSwitch,
    /// Bench hook: threads that sample large steps (0 = llama.cpp's thread count), so that
    /// llama.cpp's own CPU threads can be set apart (`--threads`): on a GPU they only look up
    /// the steps' embedding rows, yet wake and meet at a barrier every step.
    #[arg(long, hide = true, default_value_t = 0)]
    pub sample_threads: usize,
    /// Print where decode steps spend their time (per-phase means) to stderr every N decode
    /// steps; 0 = off.
    #[arg(long, hide = true, default_value_t = 0)]
    pub step_stats: u32,
    /// Test hook: slow the load down by this many ms, so the loading state is observable.
    #[arg(long, hide = true, default_value_t = 0)]
    pub load_delay_ms: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPadding {
    Auto,
    On,
    Off,
}

/// Whether every layer and the output layer run on a GPU: a GPU backend is loaded and
/// `gpu_layers` covers all `n_layer` + 1 layers (llama.cpp offloads the last `gpu_layers`, the
/// output layer last; negative = all).
pub fn whole_model_offloaded(gpu: bool, gpu_layers: i32, n_layer: i32) -> bool {
    gpu && (gpu_layers < 0 || gpu_layers > n_layer)
}

/// A switch of the host's work around a GPU step (`--prewake`, `--mask-after-launch`): auto is
/// on when the whole model runs on a GPU ([`host_switch_on`]).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostSwitch {
    Auto,
    On,
    Off,
}

/// Whether a [`HostSwitch`] is on, and why (for the load log). `auto`: when the whole model is
/// on a GPU ([`whole_model_offloaded`]), so that a decode step's wait is the device's and the
/// host's work can be moved into it. With any layer on the CPU, llama.cpp's threads compute
/// during the wait, and the cores are theirs.
/// - `--prewake`: the sampling pool's threads sleep through most of the wait and spin only
///   for its last ~0.3 ms (H100, run V: x16 ÷ batched-bench B=16 0.835 → 0.938).
/// - `--mask-after-launch`: grammar commits and masks move out of sampling and launching into
///   the wait (H100, run Z: 16 JSON-schema streams' sampling 0.353 → 0.172 ms a step,
///   constrained ÷ free 0.958 → 0.978).
pub fn host_switch_on(
    mode: HostSwitch,
    gpu: bool,
    gpu_layers: i32,
    n_layer: i32,
) -> (bool, &'static str) {
    let offloaded = whole_model_offloaded(gpu, gpu_layers, n_layer);
    match mode {
        HostSwitch::On => (true, "on"),
        HostSwitch::Off => (false, "off"),
        HostSwitch::Auto if offloaded => (true, "auto: the whole model on a GPU"),
        HostSwitch::Auto => (false, "auto: layers on the CPU"),
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSampling {
    Auto,
    On,
    Off,
}

/// Whether to sample on the device, and why (for the load log). `auto`: with one slot, when the
/// logits are computed on a GPU: the output layer is offloaded, which llama.cpp does last, so
/// only with the whole model ([`whole_model_offloaded`]). Never while the runner drafts (`drafts`: an n-gram drafter or a draft model,
/// `on` included): a verify step has several outputs of one sequence, and llama.cpp's device
/// samplers take one output per sequence (`llama_decode` refuses the step).
pub fn device_sampling_on(
    mode: DeviceSampling,
    gpu: bool,
    gpu_layers: i32,
    n_layer: i32,
    parallel: u32,
    drafts: bool,
) -> (bool, &'static str) {
    let offloaded = whole_model_offloaded(gpu, gpu_layers, n_layer);
    match mode {
        DeviceSampling::Off => (false, "--device-sampling"),
        _ if drafts => (
            false,
            "drafting verifies several tokens of a sequence in one step",
        ),
        DeviceSampling::On => (true, "--device-sampling"),
        DeviceSampling::Auto if parallel > 1 => (false, "auto: more than one slot"),
        DeviceSampling::Auto if offloaded => (true, "auto: one slot, the output layer on a GPU"),
        DeviceSampling::Auto => (false, "auto: the output layer is on the CPU"),
    }
}
