//! Configuration: parsed once (clap derive + env). (placeholder)
