//! Safetensors (MLX) models as the server sees them: the bounded header reader and blob writer
//! (`header`), and the facts `config.json` plus tensor headers give `/api/show`, `/api/tags`
//! and create (`info`). The store layout is Ollama's: one `application/vnd.ollama.image.tensor`
//! layer per tensor or packed quantized group (`X.weight`, `X.weight.scale`, `X.weight.bias`,
//! blob `__metadata__` `quant_type`/`group_size`), `application/vnd.ollama.image.json` layers for
//! the config files, config blob `model_format: "safetensors"`.

pub mod header;
pub mod info;
pub mod view;
