//! (placeholder: owned by the store work stream)
