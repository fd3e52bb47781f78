//! herd's control plane: the HTTP API, the model store, prompt rendering, and the scheduler that
//! supervises runner processes. The `herd` binary (`main.rs`) is a thin shell over this library so
//! tests can build the same application in-process.

pub mod api;
pub mod cli;
pub mod config;
pub mod convert;
pub mod create;
pub mod engine;
pub mod error;
pub mod eval;
pub mod gguf;
pub mod images;
pub mod metrics;
pub mod mlx;
pub mod modelfile;
pub mod prompt;
pub mod provenance;
pub mod remote;
pub mod runner;
pub mod scheduler;
pub mod store;
pub mod telemetry;
pub mod worker;

/// Version reported by `herd --version` and `/api/version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The Ollama release whose API and model format herd implements: a model whose `REQUIRES` is
/// newer cannot be served faithfully and is refused.
pub const OLLAMA_COMPAT_VERSION: &str = "0.30.0";
