//! Layers on other hosts (issue 20): ggml's RPC backend behind herd's own authenticated tunnel.
//!
//! ```text
//! serving host                                       worker host
//! runner --rpc 127.0.0.1:L ─▶ serve_end (loopback L) ══TLS══▶ worker (ADDR:PORT) ─▶ rpc-server
//!                              hello + token / client cert      checks, then pipes    127.0.0.1:R
//! ```
//!
//! llama.cpp's RPC protocol has no authentication and a history of memory-safety bugs
//! (shared/research/anchors.md), so its server (`runner-llamacpp rpc-server`) only listens on
//! loopback, and the worker opens a loopback connection to it only after a connection has passed
//! the TLS handshake and the credential check (`handshake`). Nothing a client sends before that
//! reaches llama.cpp's code.

pub mod handshake;
mod listen;
pub mod pipe;
pub mod serve_end;
pub mod tls;

pub use listen::run;
pub use serve_end::RpcWorkers;
