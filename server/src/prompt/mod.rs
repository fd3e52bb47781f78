//! Prompt rendering: a Go `text/template` engine for Ollama TEMPLATE layers and the GGUF Jinja
//! path (placeholder while the engine lands).

pub mod gotmpl;
