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
pub mod modelfile;
pub mod prompt;
pub mod provenance;
pub mod runner;
pub mod scheduler;
pub mod store;
pub mod telemetry;

/// Version reported by `herd --version` and `/api/version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
