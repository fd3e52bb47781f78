//! (placeholder: owned by the runner work stream)
