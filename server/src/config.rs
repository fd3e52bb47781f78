//! The one command line (`Cli`) and the serve configuration (`Config`), parsed once by clap from
//! flags and Ollama's environment variables. Every environment variable the server honours is a
//! typed field here; no other module of this crate reads the environment. Value grammar follows
//! Ollama's `envconfig` (trimming, bool and duration rules, defaults for malformed values).

mod admin;
mod client;
mod host;
mod log;
mod ops;
mod parse;
pub use parse::take_fallbacks;
mod remote;
mod rpc;

use crate::prompt::prefer::GoTemplate;
use clap::{Args, Parser, Subcommand};
use runner_protocol::{FlashAttention, KvCacheType};
use std::path::PathBuf;

pub use admin::{ArchiveArgs, DoctorArgs};
pub use client::{
    history_file, ClientArgs, CopyArgs, CreateArgs, ListArgs, RemoveArgs, RunArgs, ShowArgs,
    StopArgs, TransferArgs,
};
pub use host::{join_host_port, split_host_port, OllamaHost, DEFAULT_PORT};
pub use log::{parse_log_level, LogArgs, LogFormat, LogLevel};
pub use ops::{keys_from_file_text, MaxKeepAlive, Pins, PullHosts, Secrets};
pub use parse::{
    clean, env_duration_nanos, go_parse_bool, go_parse_duration, keep_alive_display,
    keep_alive_from_nanos, ollama_bool, KeepAlive, LoadTimeout,
};
pub use remote::{CloudBase, RemoteArgs, Remotes, DEFAULT_CLOUD_BASE_URL};
pub use rpc::{RpcArgs, RpcTls, WorkerArgs, Workers};

/// File name of the llama.cpp runner binary, looked up next to `herd` by default.
pub const RUNNER_BIN: &str = "runner-llamacpp";
/// The safetensors (MLX) runner's file name.
pub const MLX_RUNNER_BIN: &str = "runner-mlx";

#[derive(Debug, Parser)]
#[command(
    name = "herd",
    disable_version_flag = true,
    arg_required_else_help = true,
    about = "Large language model server, compatible with Ollama's API, CLI and model store"
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    /// Show version information (this client's, the server's and the engine pins)
    #[arg(short = 'v', long = "version")]
    pub version: bool,
    /// The server `--version` asks for its version.
    #[arg(long = "host", env = "OLLAMA_HOST", value_parser = parse_host, default_value = "127.0.0.1:11434", hide = true)]
    pub host: OllamaHost,
    /// `None` only with `--version` (clap prints help when nothing is given).
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the server
    #[command(alias = "start")]
    Serve(Box<Config>),
    /// List models
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// List running models
    Ps(ListArgs),
    /// Show information for a model
    Show(ShowArgs),
    /// Stop a running model
    Stop(StopArgs),
    /// Copy a model
    Cp(CopyArgs),
    /// Remove one or more models
    Rm(RemoveArgs),
    /// Run a model
    Run(RunArgs),
    /// Pull a model from a registry
    Pull(TransferArgs),
    /// Push a model to a registry
    Push(TransferArgs),
    /// Create a model from a Modelfile
    Create(CreateArgs),
    /// Evaluate a server: record a dataset's answers, compare two runs
    Eval(crate::eval::EvalArgs),
    /// Check this host before serving: GPU, engine libraries, disk, store, port
    Doctor(Box<DoctorArgs>),
    /// Keep this build's binary, runner and engine libraries beside the store
    Archive(Box<ArchiveArgs>),
    /// Serve this host's devices to `herd serve` on another host (ggml RPC behind an
    /// authenticated TLS tunnel)
    Worker(Box<WorkerArgs>),
}

/// Everything `herd serve` needs, from flags or Ollama's environment variables.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address to listen on: [http[s]://]host[:port]; `:port` or 0.0.0.0 listens on every interface.
    #[arg(long, env = "OLLAMA_HOST", value_parser = parse_host, default_value = "127.0.0.1:11434")]
    pub host: OllamaHost,
    /// Model store directory (holds manifests/ and blobs/).
    #[arg(long, env = "OLLAMA_MODELS", value_parser = parse_path, default_value_os_t = default_models_dir())]
    pub models: PathBuf,
    /// Extra allowed CORS origins, comma-separated; added to the built-in local list.
    #[arg(long, env = "OLLAMA_ORIGINS", value_parser = parse_origins, default_value = "")]
    pub origins: Origins,
    /// Do not prune unreferenced blobs at startup.
    #[arg(long, env = "OLLAMA_NOPRUNE", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub noprune: bool,
    /// How long a model stays loaded after its last request (Go duration or seconds; negative = forever).
    #[arg(long, env = "OLLAMA_KEEP_ALIVE", value_parser = parse::clap_keep_alive, default_value = "5m",
          allow_negative_numbers = true)]
    pub keep_alive: KeepAlive,
    /// Parallel requests per loaded model.
    #[arg(long, env = "OLLAMA_NUM_PARALLEL", value_parser = parse::clap_uint::<1>, default_value = "1")]
    pub num_parallel: u32,
    /// Maximum loaded models; 0 = automatic (3 per GPU).
    #[arg(long, env = "OLLAMA_MAX_LOADED_MODELS", value_parser = parse::clap_uint::<0>, default_value = "0")]
    pub max_loaded_models: u32,
    /// Maximum queued requests before answering 503.
    #[arg(long, env = "OLLAMA_MAX_QUEUE", value_parser = parse::clap_uint::<512>, default_value = "512")]
    pub max_queue: u32,
    /// Spread every model over all GPUs; unset, a model that fits on one GPU loads on the one
    /// with the most free memory (Ollama's `OLLAMA_SCHED_SPREAD`).
    #[arg(long, env = "OLLAMA_SCHED_SPREAD", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub sched_spread: bool,
    /// Bytes of each GPU's memory the scheduler leaves unused.
    #[arg(long, env = "OLLAMA_GPU_OVERHEAD", value_parser = parse::clap_byte_size, default_value = "0")]
    pub gpu_overhead: u64,
    /// Bytes all loaded models may hold together (a model bigger than this is refused, others
    /// are evicted to make room); unset = GPU memory less the overhead, or available RAM.
    #[arg(long, env = "HERD_MEMORY_BUDGET", value_parser = parse::clap_byte_size)]
    pub memory_budget: Option<u64>,
    /// Default context length; 0 = chosen from available memory.
    #[arg(long, env = "OLLAMA_CONTEXT_LENGTH", value_parser = parse::clap_uint::<0>, default_value = "0")]
    pub context_length: u32,
    /// Which template renders a model that has both a TEMPLATE layer and a GGUF chat template:
    /// unset = the GGUF one when it offers more; true = always the TEMPLATE; false = the GGUF
    /// one whenever there is one.
    #[arg(long, env = "OLLAMA_GO_TEMPLATE", value_parser = parse::clap_go_template, default_value = "")]
    pub go_template: GoTemplate,
    /// Flash attention: unset = auto; a bool forces it on or off.
    #[arg(long, env = "OLLAMA_FLASH_ATTENTION", value_parser = parse::clap_flash_attention, default_value = "auto")]
    pub flash_attention: FlashAttention,
    /// K/V cache quantization: f16 (default), q8_0 or q4_0.
    #[arg(long, env = "OLLAMA_KV_CACHE_TYPE", value_parser = parse::clap_kv_cache_type, default_value = "f16")]
    pub kv_cache_type: KvCacheType,
    /// How long a model load may stall before giving up (Go duration or seconds; <= 0 = no limit).
    #[arg(long, env = "OLLAMA_LOAD_TIMEOUT", value_parser = parse::clap_load_timeout, default_value = "5m",
          allow_negative_numbers = true)]
    pub load_timeout: LoadTimeout,
    /// Longest silence from a runner within a completion before it is killed as stuck (<= 0 = off).
    #[arg(long, env = "HERD_PROGRESS_TIMEOUT", value_parser = parse::clap_deadline, default_value = "5m", allow_negative_numbers = true)]
    pub progress_timeout: LoadTimeout,
    /// Time between health probes of each ready runner (<= 0 = off).
    #[arg(long, env = "HERD_HEALTH_INTERVAL", value_parser = parse::clap_deadline, default_value = "10s", allow_negative_numbers = true)]
    pub health_interval: LoadTimeout,
    /// How long one health probe may take before the runner is killed as stuck (<= 0 = probes off).
    #[arg(long, env = "HERD_HEALTH_TIMEOUT", value_parser = parse::clap_deadline, default_value = "30s", allow_negative_numbers = true)]
    pub health_timeout: LoadTimeout,
    /// Run thinking + structured output as two generations (rollback switch for single-pass).
    #[arg(long, env = "OLLAMA_FORMAT_TWO_PASS", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub format_two_pass: bool,
    /// runner-mlx drafts (HERD_DRAFT_NGRAM) for constrained requests too (Ollama's MLX
    /// runner's switch; runner-llamacpp's is HERD_DRAFT_UNDER_GRAMMAR).
    #[arg(long, env = "OLLAMA_MLX_DRAFT_UNDER_GRAMMAR", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub mlx_draft_under_grammar: bool,
    /// Draft tokens per step (at most) for the runners' n-gram (prompt lookup) speculative
    /// drafter; 0 = off. Output is identical either way; it pays on copy-heavy work.
    #[arg(long, env = "HERD_DRAFT_NGRAM", value_parser = parse::clap_uint::<0>, default_value = "0")]
    pub draft_ngram: u32,
    /// Let the llama.cpp runner's drafter run while a grammar constrains output.
    #[arg(long, env = "HERD_DRAFT_UNDER_GRAMMAR", value_parser = parse::clap_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    pub draft_under_grammar: bool,
    /// Path of the runner-llamacpp binary (default: next to the herd executable).
    #[arg(long, env = "HERD_RUNNER", value_parser = parse_path)]
    pub runner: Option<PathBuf>,
    /// Path of the runner-mlx binary for safetensors models (default: HERD_RUNNER_DIR, else
    /// next to the herd executable).
    #[arg(long, env = "HERD_MLX_RUNNER", value_parser = parse_path)]
    pub mlx_runner: Option<PathBuf>,
    /// Directory holding runner binaries (used when HERD_RUNNER is unset).
    #[arg(long, env = "HERD_RUNNER_DIR", value_parser = parse_path)]
    pub runner_dir: Option<PathBuf>,
    /// Largest blob `POST /api/blobs/:digest` accepts, in bytes (suffixes K/M/G/T, KiB/MiB/GiB/TiB;
    /// 0 = no limit); bigger uploads get 413 and leave nothing behind.
    #[arg(long, env = "HERD_MAX_BLOB_SIZE", value_parser = parse::clap_byte_size, default_value = "512GiB")]
    pub max_blob_size: u64,
    /// API keys, comma-separated: when set (here or in HERD_API_KEYS_FILE), every route but
    /// /healthz and /readyz requires `Authorization: Bearer <key>`.
    #[arg(long, env = "HERD_API_KEYS", value_parser = ops::parse_key_list, default_value = "",
          hide_env_values = true, hide_default_value = true)]
    pub api_keys: Secrets,
    /// File of API keys, one per line (`#` comments); joined with HERD_API_KEYS.
    #[arg(long, env = "HERD_API_KEYS_FILE", value_parser = parse_path)]
    pub api_keys_file: Option<PathBuf>,
    /// After SIGTERM, how long in-flight requests may run before runners are stopped.
    #[arg(long, env = "HERD_SHUTDOWN_GRACE", value_parser = ops::parse_duration, default_value = "10s")]
    pub shutdown_grace: std::time::Duration,
    /// Longest keep_alive a request or OLLAMA_KEEP_ALIVE may set; negative (forever) is capped
    /// too. Unset = no cap.
    #[arg(long, env = "HERD_MAX_KEEP_ALIVE", value_parser = ops::parse_max_keep_alive, default_value = "",
          hide_default_value = true)]
    pub max_keep_alive: MaxKeepAlive,
    /// Models (comma list) that stay loaded: never evicted for another model, no idle expiry.
    #[arg(long, env = "HERD_PIN", value_parser = ops::parse_pins, default_value = "")]
    pub pin: Pins,
    /// Registry hosts (comma list, `host` or `host:port`) that pull, push and create may
    /// contact; others get 403. Empty = any.
    #[arg(long, env = "HERD_ALLOW_PULL_HOSTS", value_parser = ops::parse_pull_hosts, default_value = "")]
    pub allow_pull_hosts: PullHosts,
    /// TLS, body and idle timeouts, the connection cap (`HERD_TLS_*`, `HERD_BODY_*`, …).
    #[command(flatten)]
    pub listen: ops::Listen,
    /// Layers on other hosts: `HERD_RPC_WORKERS` and the tunnel's credentials.
    #[command(flatten)]
    pub rpc: RpcArgs,
    /// Cloud and remote models: `OLLAMA_REMOTES`, `OLLAMA_CLOUD_BASE_URL`, `OLLAMA_NO_CLOUD`.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

impl Config {
    /// The runner's liveness deadlines (`runner::liveness`).
    pub fn liveness(&self) -> crate::runner::Liveness {
        let probe_timeout = self.health_timeout.0;
        crate::runner::Liveness {
            progress_timeout: self.progress_timeout.0,
            probe_interval: self.health_interval.0.filter(|_| probe_timeout.is_some()),
            probe_timeout: probe_timeout.unwrap_or_default(),
        }
    }

    /// The runner binary: `HERD_RUNNER`, else `HERD_RUNNER_DIR/runner-llamacpp`, else next to
    /// the running executable.
    pub fn runner_path(&self) -> PathBuf {
        if let Some(p) = &self.runner {
            return p.clone();
        }
        if let Some(dir) = &self.runner_dir {
            return dir.join(RUNNER_BIN);
        }
        default_runner_path()
    }

    /// The MLX runner: `HERD_MLX_RUNNER`, else `HERD_RUNNER_DIR/runner-mlx`, else next to the
    /// running executable.
    pub fn mlx_runner_path(&self) -> PathBuf {
        if let Some(p) = &self.mlx_runner {
            return p.clone();
        }
        if let Some(dir) = &self.runner_dir {
            return dir.join(MLX_RUNNER_BIN);
        }
        default_runner_path().with_file_name(MLX_RUNNER_BIN)
    }

    /// Every configured API key: HERD_API_KEYS plus the lines of HERD_API_KEYS_FILE (read
    /// once, at startup; an unreadable or empty file is an error).
    pub fn api_keys(&self) -> Result<Vec<String>, String> {
        let mut keys = self.api_keys.0.clone();
        if let Some(path) = &self.api_keys_file {
            let more = ops::read_keys_file(path)
                .map_err(|e| format!("HERD_API_KEYS_FILE {}: {e}", path.display()))?;
            keys.extend(more);
        }
        Ok(keys)
    }

    /// The effective configuration as `(ENV_NAME, value)` pairs for the startup log, with
    /// secret-looking values redacted.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let fa = self.flash_attention.as_str().to_string();
        let pairs: Vec<(&'static str, String)> = vec![
            ("OLLAMA_HOST", self.host.to_string()),
            ("OLLAMA_MODELS", self.models.display().to_string()),
            ("OLLAMA_ORIGINS", self.origins.allowed().join(",")),
            ("OLLAMA_NOPRUNE", self.noprune.to_string()),
            ("OLLAMA_KEEP_ALIVE", keep_alive_display(&self.keep_alive)),
            ("OLLAMA_NUM_PARALLEL", self.num_parallel.to_string()),
            (
                "OLLAMA_MAX_LOADED_MODELS",
                self.max_loaded_models.to_string(),
            ),
            ("OLLAMA_MAX_QUEUE", self.max_queue.to_string()),
            ("OLLAMA_CONTEXT_LENGTH", self.context_length.to_string()),
            ("OLLAMA_GPU_OVERHEAD", self.gpu_overhead.to_string()),
            ("OLLAMA_SCHED_SPREAD", self.sched_spread.to_string()),
            (
                "HERD_MEMORY_BUDGET",
                self.memory_budget
                    .map_or_else(String::new, |b| b.to_string()),
            ),
            ("OLLAMA_FLASH_ATTENTION", fa),
            ("OLLAMA_GO_TEMPLATE", self.go_template.as_str().to_string()),
            (
                "OLLAMA_KV_CACHE_TYPE",
                self.kv_cache_type.as_str().to_string(),
            ),
            ("OLLAMA_LOAD_TIMEOUT", self.load_timeout.shown()),
            ("HERD_PROGRESS_TIMEOUT", self.progress_timeout.shown()),
            ("HERD_HEALTH_INTERVAL", self.health_interval.shown()),
            ("HERD_HEALTH_TIMEOUT", self.health_timeout.shown()),
            ("OLLAMA_FORMAT_TWO_PASS", self.format_two_pass.to_string()),
            (
                "OLLAMA_MLX_DRAFT_UNDER_GRAMMAR",
                self.mlx_draft_under_grammar.to_string(),
            ),
            ("HERD_DRAFT_NGRAM", self.draft_ngram.to_string()),
            (
                "HERD_DRAFT_UNDER_GRAMMAR",
                self.draft_under_grammar.to_string(),
            ),
            ("HERD_RUNNER", self.runner_path().display().to_string()),
            (
                "HERD_MLX_RUNNER",
                self.mlx_runner_path().display().to_string(),
            ),
            ("HERD_MAX_BLOB_SIZE", self.max_blob_size.to_string()),
            // Only how many: a key never reaches the log.
            ("HERD_API_KEYS", format!("{} keys", self.api_keys.0.len())),
            (
                "HERD_API_KEYS_FILE",
                self.api_keys_file
                    .as_ref()
                    .map_or_else(String::new, |p| p.display().to_string()),
            ),
            ("HERD_SHUTDOWN_GRACE", format!("{:?}", self.shutdown_grace)),
            (
                "HERD_MAX_KEEP_ALIVE",
                self.max_keep_alive
                    .0
                    .map_or_else(String::new, |d| format!("{d:?}")),
            ),
            ("HERD_PIN", self.pin.shown()),
            ("HERD_ALLOW_PULL_HOSTS", self.allow_pull_hosts.0.join(",")),
        ];
        let pairs = pairs
            .into_iter()
            .chain(self.listen.effective())
            .chain(self.rpc.effective())
            .chain(self.remote.effective());
        pairs.map(|(k, v)| (k, redact(k, v))).collect()
    }
}

/// The runner binary next to the running executable (the default when nothing is configured).
pub fn default_runner_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(RUNNER_BIN)))
        .unwrap_or_else(|| PathBuf::from(RUNNER_BIN))
}

/// Values of variables whose names suggest credentials never reach the log.
pub fn redact(name: &str, value: String) -> String {
    let upper = name.to_ascii_uppercase();
    let secret = ["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH"]
        .iter()
        .any(|w| upper.contains(w));
    // A setting that names a file holding a secret shows the path: the path is not the secret,
    // and an operator needs it to see which file was read.
    let path = upper.ends_with("_FILE") || upper == "HERD_TLS_KEY";
    if secret && !path && !value.is_empty() {
        "[redacted]".to_string()
    } else {
        value
    }
}

/// `OLLAMA_ORIGINS` entries (already split and trimmed); see [`Origins::allowed`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins(pub Vec<String>);

impl Origins {
    /// Ollama's `AllowedOrigins()`: the configured entries, then the built-in local list.
    pub fn allowed(&self) -> Vec<String> {
        let mut all = self.0.clone();
        for host in ["localhost", "127.0.0.1", "0.0.0.0"] {
            all.push(format!("http://{host}"));
            all.push(format!("https://{host}"));
            all.push(format!("http://{host}:*"));
            all.push(format!("https://{host}:*"));
        }
        for scheme in ["app", "file", "tauri", "vscode-webview", "vscode-file"] {
            all.push(format!("{scheme}://*"));
        }
        all
    }
}

fn parse_origins(raw: &str) -> Result<Origins, String> {
    Ok(Origins(
        clean(raw)
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

fn parse_host(raw: &str) -> Result<OllamaHost, String> {
    Ok(OllamaHost::parse(raw))
}

fn parse_path(raw: &str) -> Result<PathBuf, String> {
    match clean(raw) {
        "" => Err("empty path".to_string()),
        s => Ok(PathBuf::from(s)),
    }
}

/// `~/.ollama`: where Ollama keeps its registry key pair (`id_ed25519`), whatever
/// `OLLAMA_MODELS` says.
pub fn key_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".ollama")
}

/// `~/.ollama/models`, the store an existing Ollama install uses.
pub fn default_models_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".ollama").join("models")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_extend_the_default_list() {
        let o = parse_origins(" \"https://a.example, http://b.example:8080,\" ").unwrap();
        assert_eq!(o.0, vec!["https://a.example", "http://b.example:8080"]);
        let all = o.allowed();
        assert_eq!(all[0], "https://a.example");
        assert!(all.contains(&"http://localhost:*".to_string()));
        assert!(all.contains(&"vscode-file://*".to_string()));
        assert_eq!(all.len(), 2 + 12 + 5);
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("HERD_API_KEY", "s3cret".into()), "[redacted]");
        assert_eq!(redact("OLLAMA_AUTH", "x".into()), "[redacted]");
        assert_eq!(redact("OLLAMA_HOST", "1.2.3.4".into()), "1.2.3.4");
        assert_eq!(redact("HERD_API_KEY", String::new()), "");
        assert_eq!(redact("HERD_TLS_KEY", "/etc/k.pem".into()), "/etc/k.pem");
        assert_eq!(
            redact("HERD_API_KEYS_FILE", "/etc/keys".into()),
            "/etc/keys"
        );
    }

    /// One test for everything that goes through clap, so no other test races on the env.
    #[test]
    fn command_line() {
        let cli = Cli::try_parse_from([
            "herd",
            "serve",
            "--host",
            "0.0.0.0:8080",
            "--models",
            "/tmp/m",
            "--noprune",
            "--keep-alive",
            "-1",
            "--num-parallel",
            "4",
            "--load-timeout",
            "0",
            "--runner-dir",
            "/opt/herd",
        ])
        .unwrap();
        let Command::Serve(cfg) = cli.command.unwrap() else {
            panic!("expected serve")
        };
        assert_eq!(cfg.host.bind_addr(), "0.0.0.0:8080");
        assert_eq!(cfg.models, PathBuf::from("/tmp/m"));
        assert!(cfg.noprune);
        assert_eq!(cfg.keep_alive, KeepAlive::Forever);
        assert_eq!(cfg.num_parallel, 4);
        assert_eq!(cfg.load_timeout, LoadTimeout(None));
        assert!(!cfg.sched_spread, "OLLAMA_SCHED_SPREAD defaults to off");
        assert_eq!(
            cfg.runner_path(),
            PathBuf::from("/opt/herd/runner-llamacpp")
        );
        assert_eq!(cfg.mlx_runner_path(), PathBuf::from("/opt/herd/runner-mlx"));
        let cli = Cli::try_parse_from([
            "herd",
            "serve",
            "--runner-dir",
            "/opt/herd",
            "--mlx-runner",
            "/x/runner-mlx",
        ])
        .unwrap();
        let Command::Serve(mlx) = cli.command.unwrap() else {
            panic!("expected serve")
        };
        assert_eq!(mlx.mlx_runner_path(), PathBuf::from("/x/runner-mlx"));
        assert_eq!(
            mlx.runner_path(),
            PathBuf::from("/opt/herd/runner-llamacpp")
        );
        let pairs = cfg.effective();
        assert!(pairs
            .iter()
            .any(|(k, v)| *k == "OLLAMA_NUM_PARALLEL" && v == "4"));

        let cli = Cli::try_parse_from(["herd", "ls", "--host", "https://example.com/o"]).unwrap();
        let Command::List(c) = cli.command.unwrap() else {
            panic!("expected list")
        };
        assert_eq!(c.client.host.connect_url(), "https://example.com:443/o");
        assert_eq!(c.prefix, None);

        let cli = Cli::try_parse_from(["herd", "rm", "a", "b:1"]).unwrap();
        let Command::Rm(r) = cli.command.unwrap() else {
            panic!("expected rm")
        };
        assert_eq!(r.models, vec!["a", "b:1"]);
        assert!(Cli::try_parse_from(["herd", "rm"]).is_err());

        let cli = Cli::try_parse_from(["herd", "show", "m", "--parameters", "-v"]).unwrap();
        let Command::Show(s) = cli.command.unwrap() else {
            panic!("expected show")
        };
        assert!(s.parameters && s.verbose && !s.license);

        // Optional-value flags never swallow the next word.
        let cli =
            Cli::try_parse_from(["herd", "--debug", "serve", "--noprune", "--host", "h"]).unwrap();
        assert_eq!(cli.log.level, LogLevel::Debug);
        let Command::Serve(cfg) = cli.command.unwrap() else {
            panic!("expected serve")
        };
        assert!(cfg.noprune);
        // Ollama's bool grammar: a non-empty value that is not a Go bool is true.
        for (flag, want) in [
            ("--sched-spread", true),
            ("--sched-spread=yes", true),
            ("--sched-spread=1", true),
            ("--sched-spread=false", false),
            ("--sched-spread=0", false),
        ] {
            let cli = Cli::try_parse_from(["herd", "serve", flag]).unwrap();
            let Command::Serve(cfg) = cli.command.unwrap() else {
                panic!("expected serve")
            };
            assert_eq!(cfg.sched_spread, want, "{flag}");
            assert!(cfg
                .effective()
                .contains(&("OLLAMA_SCHED_SPREAD", want.to_string())));
        }
        let cli = Cli::try_parse_from(["herd", "--debug=2", "serve", "--noprune=false"]).unwrap();
        assert_eq!(cli.log.level, LogLevel::Trace);
        let Command::Serve(cfg) = cli.command.unwrap() else {
            panic!("expected serve")
        };
        assert!(!cfg.noprune);

        for flag in ["--version", "-v"] {
            let cli = Cli::try_parse_from(["herd", flag]).unwrap();
            assert!(cli.version && cli.command.is_none(), "{flag}");
        }
        assert!(!Cli::try_parse_from(["herd", "ls"]).unwrap().version);
        // `show -v` stays show's verbose flag.
        let cli = Cli::try_parse_from(["herd", "show", "m", "-v"]).unwrap();
        assert!(!cli.version);
    }
}
