//! (placeholder: owned by the prompt work stream)
