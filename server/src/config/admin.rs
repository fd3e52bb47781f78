//! The operator subcommands' arguments (`herd doctor`, `herd archive`). Both take the whole serve
//! configuration (`super::Config`, same flags and environment), so they check and archive exactly
//! what `herd serve` would use with the same environment file. Part of the one command line.

use clap::Args;
use std::path::PathBuf;

use super::{parse_path, Config};

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Also re-hash every blob in the store against its sha256 name (reads every byte).
    #[arg(long)]
    pub verify: bool,
    /// Print only the digest of this configuration (what `/api/version` reports as
    /// `config_digest` for a server started with it) and exit; `scripts/deploy` compares it.
    #[arg(long, conflicts_with = "verify")]
    pub print_config_digest: bool,
    /// Only ask the server at OLLAMA_HOST whether it is ready (`GET /readyz`); exit 0 when it
    /// answers 200 (a container health check that needs no curl).
    #[arg(long, conflicts_with_all = ["verify", "print_config_digest"])]
    pub ready: bool,
    #[command(flatten)]
    pub serve: Config,
}

#[derive(Debug, Clone, Args)]
pub struct ArchiveArgs {
    /// Print this build's archive name (`<version>-<commit>`) and exit.
    #[arg(long)]
    pub print_id: bool,
    /// Where archives go (default: `binaries/` beside the model store, `<OLLAMA_MODELS>/../binaries`).
    #[arg(long, value_parser = parse_path)]
    pub dest: Option<PathBuf>,
    #[command(flatten)]
    pub serve: Config,
}

impl ArchiveArgs {
    /// `--dest`, else `binaries/` in the directory holding the store.
    pub fn dest_dir(&self) -> PathBuf {
        if let Some(d) = &self.dest {
            return d.clone();
        }
        let models = &self.serve.models;
        models
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("binaries"), |p| p.join("binaries"))
    }
}
