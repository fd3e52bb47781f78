//! GGUF: a bounded, panic-free metadata reader (header, key/values, tensor infos) for GGUF v2/v3
//! files of any size, the facts `/api/show`, `/api/tags` and the scheduler derive from it, and a
//! small writer for fixtures. Tensor data is never read here; the runner loads it.

mod check;
mod info;
mod reader;
mod types;
mod value;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_models;
#[cfg(test)]
mod tests_seeds;

pub use info::{human_number, Details};
pub use reader::{
    read, read_bytes, read_path, GgufFile, ReadOptions, TensorInfo, DEFAULT_ALIGNMENT,
    INLINE_ARRAY_MAX, MAX_ALIGNMENT, MAX_ARRAY_LEN, MAX_BLOCK_COUNT, MAX_DIMS, MAX_KV_COUNT,
    MAX_STRING_LEN, MAX_TENSOR_COUNT,
};
pub use types::{file_type_name, GgmlType};
pub use value::{Array, ArrayValues, Value, ValueType};
pub use writer::GgufBuilder;
