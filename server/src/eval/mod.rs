//! `herd eval`: the instruments that show whether a build, config or engine changed answers.
//! `run` records a dataset's answers with provenance (run.rs, dataset.rs, record.rs), `compare`
//! pairs two runs and tests the difference (compare.rs, score.rs, stats.rs, plot.rs), `repeat` counts
//! byte-identical answers to one request across runner states (repeat.rs), `parity` compares the
//! runner's first-step log-probs with llama.cpp's own llama-server (parity.rs). A thin HTTP client
//! of a running server, like the other client subcommands.

pub mod compare;
pub mod dataset;
pub mod parity;
pub mod plot;
pub mod record;
pub mod repeat;
pub mod run;
pub mod score;
pub mod stats;

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::config::ClientArgs;

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum EvalCommand {
    /// Send each dataset item to a server and record the answers with provenance
    Run(RunArgs),
    /// Pair two runs item by item: accuracy, flips, McNemar exact p, identical responses
    Compare(CompareArgs),
    /// Send one request N times in five states (cold, warm, prefix, alone, concurrent) and count
    /// the answers byte-identical to the first
    Repeat(RepeatArgs),
    /// Compare the runner's first-step top-k log-probs on fixed prompts with llama.cpp's
    /// llama-server running the same GGUF: argmax agreement and max |Δlogprob| per prompt
    Parity(ParityArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ParityArgs {
    /// The llama-server to compare with (its base URL), serving the same GGUF
    #[arg(long)]
    pub llama_server: String,
    /// The herd model (default: the server's only model)
    #[arg(long)]
    pub model: Option<String>,
    /// Prompts, one per line (a line may be a JSON string); default: a built-in set of 8
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// How many top tokens to compare (1-20)
    #[arg(long, default_value_t = 20)]
    pub top_k: u32,
    /// herd's inference threads (options.num_thread); give llama-server the same `-t`
    #[arg(long)]
    pub threads: Option<u32>,
    /// Print a JSON record instead of the table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RepeatArgs {
    /// An /api/chat (messages) or /api/generate (prompt) request body
    pub request: PathBuf,
    /// Times per state
    #[arg(short = 'n', default_value_t = 20)]
    pub n: u32,
    /// The model (default: the request's "model")
    #[arg(long)]
    pub model: Option<String>,
    /// Print a JSON record (per-state counts) instead of the table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The dataset: JSONL items with id, messages or prompt, and optional images, format,
    /// options, think, gold, scorer
    pub dataset: PathBuf,
    /// The model (default: the server's only model)
    #[arg(long)]
    pub model: Option<String>,
    /// Where to write the records (default: DATASET with extension .run.jsonl); rows already
    /// there are skipped (resume)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Unload the model and wait until nothing is loaded before each item
    #[arg(long)]
    pub cold: bool,
    /// Send each item this many times (rows are keyed by id and repeat)
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    pub a: PathBuf,
    pub b: PathBuf,
    /// exact | contains | regex | json-field:PATH (default: each row's own, else exact)
    #[arg(long)]
    pub scorer: Option<String>,
    /// Print the comparison as JSON, with the item-by-item verdicts
    #[arg(long)]
    pub json: bool,
    /// Also draw per-chunk accuracy and latency distributions of both runs to this PNG
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    match args.command {
        EvalCommand::Run(a) => run::run(a).await,
        EvalCommand::Compare(a) => compare::run(a),
        EvalCommand::Repeat(a) => repeat::run(a).await,
        EvalCommand::Parity(a) => parity::run(a).await,
    }
}
