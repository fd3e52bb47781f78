//! (placeholder: owned by the api work stream)
