//! `herd eval`: the instruments that show whether a build, config or engine changed answers.
//! `run` records a dataset's answers with provenance (run.rs, dataset.rs, record.rs), `compare`
//! pairs two runs and tests the difference (compare.rs, score.rs, stats.rs, plot.rs), `repeat` counts
//! byte-identical answers to one request across runner states (repeat.rs). A thin HTTP client of
//! a running server, like the other client subcommands.

pub mod compare;
pub mod dataset;
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
    }
}
