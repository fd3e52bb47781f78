//! (placeholder: owned by the cli work stream)
