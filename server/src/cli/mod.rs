//! (placeholder: owned by the cli work stream)

pub mod create;
