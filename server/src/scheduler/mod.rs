//! (placeholder: owned by the scheduler work stream)
