//! The client subcommands' arguments (`herd list|show|stop|cp|rm|run|pull|push|create`): where
//! the server is and what each command takes. Part of the one command line (`super::Cli`).

use clap::Args;
use std::path::PathBuf;

use super::{parse, parse_host, OllamaHost};

/// Where a client command finds the server.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Server address: [http[s]://]host[:port][/path]
    #[arg(long, env = "OLLAMA_HOST", value_parser = parse_host, default_value = "127.0.0.1:11434")]
    pub host: OllamaHost,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only list models whose name starts with this (case-insensitive)
    pub prefix: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    pub model: String,
    /// Show license of a model
    #[arg(long)]
    pub license: bool,
    /// Show Modelfile of a model
    #[arg(long)]
    pub modelfile: bool,
    /// Show parameters of a model
    #[arg(long)]
    pub parameters: bool,
    /// Show template of a model
    #[arg(long)]
    pub template: bool,
    /// Show system message of a model
    #[arg(long)]
    pub system: bool,
    /// Show detailed model information
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StopArgs {
    pub model: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CopyArgs {
    pub source: String,
    pub destination: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RemoveArgs {
    #[arg(required = true, num_args = 1..)]
    pub models: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    pub model: String,
    /// Prompt (words are joined with spaces; piped stdin comes first)
    pub prompt: Vec<String>,
    /// Show timings for the response
    #[arg(long)]
    pub verbose: bool,
    /// Response format (e.g. json)
    #[arg(long, default_value = "")]
    pub format: String,
    /// Enable thinking: true/false or high/medium/low/max
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub think: Option<String>,
    /// Hide thinking output (if provided)
    #[arg(long)]
    pub hidethinking: bool,
    /// Duration to keep a model loaded (e.g. 5m; negative = forever, e.g. -1s)
    #[arg(long, allow_hyphen_values = true)]
    pub keepalive: Option<String>,
    /// Don't wrap words to the next line automatically
    #[arg(long)]
    pub nowordwrap: bool,
    /// Do not record the REPL history (`~/.ollama/history`).
    #[arg(long, env = "OLLAMA_NOHISTORY", value_parser = parse::clap_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", hide = true)]
    pub nohistory: bool,
    /// The editor Ctrl-G opens the REPL's line in (`cli::editor`): `OLLAMA_EDITOR`, else
    /// `VISUAL`, else `EDITOR`, else vi.
    #[arg(long, env = "OLLAMA_EDITOR", hide = true)]
    pub editor: Option<String>,
    #[arg(long = "visual-editor", env = "VISUAL", hide = true)]
    pub visual: Option<String>,
    #[arg(long = "env-editor", env = "EDITOR", hide = true)]
    pub env_editor: Option<String>,
    /// Use an insecure registry when the model has to be pulled first
    #[arg(long)]
    pub insecure: bool,
    /// Truncate an embedding model's input to its context (the server's default: true)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub truncate: Option<bool>,
    /// Truncate an embedding model's output to this many dimensions
    #[arg(long, default_value_t = 0)]
    pub dimensions: u32,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `herd pull` / `herd push`.
#[derive(Debug, Clone, Args)]
pub struct TransferArgs {
    pub model: String,
    /// Use an insecure registry (allows `http://` names)
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    pub model: String,
    /// Name of the Modelfile (default: ./Modelfile)
    #[arg(short = 'f', long = "file")]
    pub file: Option<std::path::PathBuf>,
    /// Quantize model to this level (e.g. q4_K_M)
    #[arg(short = 'q', long)]
    pub quantize: Option<String>,
    /// Quantize the DRAFT model to this level
    #[arg(long)]
    pub draft_quantize: Option<String>,
    /// Store a safetensors model for the MLX runner instead of converting it to GGUF
    #[arg(long)]
    pub experimental: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The REPL history file, `~/.ollama/history`.
pub fn history_file() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".ollama").join("history")
}
