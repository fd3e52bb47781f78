//! (placeholder: owned by the gguf work stream)
